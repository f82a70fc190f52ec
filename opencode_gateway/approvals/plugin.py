"""The plugin OpenCode loads for a run that asks (approvals/host.py says why it works so): its
`tool.execute.before` hook asks the run's endpoint about every tool call, and throws (OpenCode
then tells the model why, and goes on) on anything but an "allow", an unreachable host included.
JavaScript, as OpenCode (Bun) runs it; no starlette here, so a run imports it before its endpoint.

Two things keep the channel the host's, whatever code the agent runs beside OpenCode:
- In a sandbox, the plugin asks over the endpoint's unix socket, bound into the sandbox where
  nothing inside can remove or replace it, never over the loopback port: socat serves that port
  inside the sandbox, and code the agent runs can kill socat and listen there itself.
- On load, before any model call, it makes OpenCode's process non-dumpable (prctl, through
  bun:ffi): no process of the same user, the agent's included, can then read its memory or
  environment (/proc/<pid>/mem, environ), where the plugin's key is. A plugin that cannot do so
  tells the host, which refuses the run's model calls (fail closed).
"""

from __future__ import annotations

import json

__all__ = ["plugin_source"]

# Both plugins': the run's endpoint, and the seal.
_COMMON = r"""import { readFileSync } from "node:fs";
import { dlopen, FFIType } from "bun:ffi";

const HOST = __HOST__;
const UNIX = __UNIX__;  // the endpoint's socket in a sandbox: the agent cannot take it over
const TOKEN_FILE = __TOKEN_FILE__;
const WAIT_MS = __WAIT_MS__;
const VIA = UNIX ? { unix: UNIX } : {};

// prctl(PR_SET_DUMPABLE, 0): this process's memory and environment unreadable by the agent's.
function sealed() {
  try {
    const int = FFIType.i32, long = FFIType.u64;
    const libc = dlopen("libc.so.6", { prctl: { args: [int, long, long, long, long], returns: int } });
    return libc.symbols.prctl(4, 0, 0, 0, 0) === 0 && libc.symbols.prctl(3, 0, 0, 0, 0) === 0;
  } catch (error) {
    return false;
  }
}
"""

PLUGIN = r"""// opencode-gateway's approvals: every tool call waits for the host's answer; no answer is a deny.
__COMMON__
export default async () => {
  const token = readFileSync(TOKEN_FILE, "utf8").trim();
  const headers = { authorization: "Bearer " + token, "content-type": "application/json" };
  const body = JSON.stringify({ sealed: sealed() });
  let key = "";
  try {
    const hello = await fetch(HOST + "/approvals/hello", { method: "POST", headers, body, ...VIA });
    if (hello.ok) key = (await hello.json()).key;
  } catch (error) {}
  return {
    "tool.execute.before": async (input, output) => {
      let answer;
      try {
        const asked = await fetch(HOST + "/approvals/ask", {
          method: "POST",
          headers: { ...headers, "x-approval-key": key },
          body: JSON.stringify({
            tool: input.tool, sessionID: input.sessionID, callID: input.callID, args: output.args,
          }),
          signal: AbortSignal.timeout(WAIT_MS),
          timeout: false,
          ...VIA,
        });
        answer = await asked.json();
      } catch (error) {
        answer = { decision: "deny", reason: "the approval host could not be reached (" + error + ")" };
      }
      if (answer.decision !== "allow") throw new Error("denied by the host: " + (answer.reason || "no reason given"));
    },
  };
};
"""


# OpenCode 2's: no hook (its endpoint holds the tool calls), only the seal and the hello, at import:
# 2.x imports a plugin's module when its server starts, before any model call.
SEAL = r"""// opencode-gateway's seal: OpenCode's server non-dumpable, then the host told so.
__COMMON__
try {
  const token = readFileSync(TOKEN_FILE, "utf8").trim();
  const headers = { authorization: "Bearer " + token, "content-type": "application/json" };
  const body = JSON.stringify({ sealed: sealed() });
  await fetch(HOST + "/approvals/hello", { method: "POST", headers, body, ...VIA });
} catch (error) {}

export default { id: "opencode-gateway-approvals", setup() {} };
"""


def plugin_source(
    host: str, token_file: str, timeout: float, unix_socket: str | None = None, *, tool_hook: bool = True
) -> str:
    """The plugin for one run: its endpoint (and its unix socket in a sandbox), the token's file,
    and how long an ask may wait; with no `tool_hook` (OpenCode 2), the seal and hello alone."""
    wait_ms = int((timeout + 30) * 1000)  # the host answers by `timeout`; this only ends a lost ask
    return (
        (PLUGIN if tool_hook else SEAL)
        .replace("__COMMON__", _COMMON)
        .replace("__HOST__", json.dumps(host))
        .replace("__UNIX__", json.dumps(unix_socket))
        .replace("__TOKEN_FILE__", json.dumps(token_file))
        .replace("__WAIT_MS__", str(wait_ms))
    )
