"""The endpoint as a long-lived server for OpenCode's interactive TUI (`opencode-gateway serve`):
the server that accounts every session, the launches that wire an OpenCode to it, and the live
spend dashboard behind its login.

May import: runs/'s wiring (never the runner: a session is no run), config/, accounting/,
endpoint/, opencode/, dashboard/, litellm_gateway/, observability/, errors, credentials."""
