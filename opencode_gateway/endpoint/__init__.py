"""The local endpoint OpenCode talks to, and the upstreams it forwards to.

May import: errors, credentials, `_litellm` (lazily), accounting/, litellm_gateway/, opencode/'s
purpose (what a request is for). Never config/: it takes values and protocols."""
