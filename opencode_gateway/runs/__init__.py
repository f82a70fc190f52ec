"""One run, end to end: the plan (every check before OpenCode starts), its assembly from parts
(account, endpoint, OpenCode's process), the runner that drives them, the preflight of its model
calls, and the conclusion (how it ended: a pure function) into the RunResult with the files it
changed.

May import: config/, accounting/, endpoint/, opencode/, approvals/, litellm_gateway/,
observability/, errors, events, credentials, `_litellm` (lazily). Never serve/, batch/ or cli/."""
