"""Approvals: the host answers every tool call the agent wants to make.

`policy` is the data (rules by tool and pattern; pure), `host` the run's side of it (the plugin
OpenCode loads, its routes on the run's endpoint, and who answers). The runner wires it into a
run. Nothing is imported here: the settings read `policy` without starlette.

May import: errors, credentials, terminal. The endpoint's token check is handed to its routes."""
