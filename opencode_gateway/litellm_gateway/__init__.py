"""Clients of a remote LiteLLM AI Gateway (proxy): the checks before a run, the spend-log
reconciliation after it, and what its answers mean. The local endpoint is `endpoint/`.

May import: errors, accounting/."""
