"""The `opencode-gateway` command line: its parser (program), what each command does (commands),
the flags several commands share, what the arguments become (Settings), and `doctor`.

A thin layer over the Python API, lazily per command.

May import: everything.
"""

from .program import entry, main

__all__ = ["entry", "main"]
