"""The local endpoint OpenCode talks to, and the upstreams it forwards to."""
