"""The spend dashboard: a page of charts and tables over the ledger (`report --html`, and live in `serve`)."""
