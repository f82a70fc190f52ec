"""A small MCP server on stdio for the tests: one tool, `lookup`, that answers `value-of-<key>`.

MCP's stdio transport: one JSON-RPC message a line. It answers initialize, tools/list, tools/call
and ping; a notification gets no answer."""

import json
import sys

TOOL = {
    "name": "lookup",
    "description": "Look a key up in the test's table.",
    "inputSchema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
}


def answer(request: dict) -> dict:
    method, params = request.get("method"), request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-06-18"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "lookup-server", "version": "1.0.0"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call":
        return {"content": [{"type": "text", "text": f"value-of-{params.get('arguments', {}).get('key')}"}]}
    if method == "ping":
        return {}
    raise KeyError(method)


for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    if "id" not in request:
        continue  # a notification
    try:
        reply = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
    except KeyError:
        reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32601, "message": "method not found"}}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
