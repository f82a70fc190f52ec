"""Many runs, unattended (`opencode-gateway batch`): the tasks file and its outcomes, the local
executor (N runs at a time), the Ray executor (a cluster's workers, one ledger on the driver),
and the progress a person follows without a live view.

May import: runs/ (each task is a run), api, config/, accounting/, litellm_gateway/, observability/,
console, events, errors, credentials, `_litellm` (lazily)."""
