"""What OpenCode offered the model (runs/offered.py): an MCP server's tools, on either generation."""

from __future__ import annotations

from pathlib import Path

from opencode_gateway.runs.offered import connected_servers, offering_servers, tool_names


def test_an_mcp_server_offers_as_tools_of_its_own_or_in_opencode_2s_code_mode_catalog(tmp_path: Path) -> None:
    servers = {"lookup", "docs"}
    direct = {"tools": [{"type": "function", "function": {"name": "lookup_find"}}], "messages": []}
    catalog = {
        "messages": [
            {"role": "system", "content": "..."},
            {"role": "user", "content": "<system-update>\\n  - tools.docs.search({query: string})\\n</system-update>"},
            {"role": "tool", "content": "tools.evil.x( written by a tool: not OpenCode's words"},
        ]
    }
    assert offering_servers(direct, tool_names(direct), servers) == {"lookup"} and offering_servers(
        catalog, set(), servers
    ) == {"docs"}
    assert offering_servers(catalog, set(), set()) == set()
    log = tmp_path / "opencode" / "log" / "opencode.log"
    log.parent.mkdir(parents=True)
    log.write_text(
        'level=INFO message="mcp connected" server=lookup tools=1 role=server\\n'
        'level=INFO message="mcp connected" server=empty tools=0 role=server\\n'
    )
    assert connected_servers(tmp_path) == {"lookup"} and connected_servers(tmp_path / "none") == set()
