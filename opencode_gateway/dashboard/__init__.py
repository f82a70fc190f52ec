"""The spend dashboard: a page of charts and tables over the ledger (`report --html`; serve/live.py
serves it live). A file, never a server.

May import: accounting/."""
