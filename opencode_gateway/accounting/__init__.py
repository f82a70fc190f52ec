"""What a request used and what it cost. Knows nothing of OpenCode or of HTTP forwarding."""
