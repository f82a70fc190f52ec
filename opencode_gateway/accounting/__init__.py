"""What a request used and what it cost: usage read from streams, prices, budgets, a run's
account, the ledger and the spend report. Knows nothing of OpenCode or of HTTP forwarding.

May import: errors, terminal, domain, `_litellm` (lazily). Never litellm_gateway/, opencode/ or
endpoint/."""
