"""A free loopback port for a test server of our own (PostgreSQL, the LiteLLM proxy, Phoenix)."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
