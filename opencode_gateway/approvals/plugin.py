"""The plugin OpenCode loads for a run that asks (approvals/host.py says why it works so): its
`tool.execute.before` hook asks the run's endpoint about every tool call, and throws (OpenCode
then tells the model why, and goes on) on anything but an "allow", an unreachable host included.
JavaScript, as OpenCode (Bun) runs it; no starlette here, so a run imports it before its endpoint.
"""

from __future__ import annotations

import json

__all__ = ["plugin_source"]

PLUGIN = r"""// opencode-gateway's approvals: every tool call waits for the host's answer; no answer is a deny.
import { readFileSync } from "node:fs";

const HOST = __HOST__;
const TOKEN_FILE = __TOKEN_FILE__;
const WAIT_MS = __WAIT_MS__;

export default async () => {
  const token = readFileSync(TOKEN_FILE, "utf8").trim();
  const headers = { authorization: "Bearer " + token, "content-type": "application/json" };
  let key = "";
  try {
    const hello = await fetch(HOST + "/approvals/hello", { method: "POST", headers, body: "{}" });
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


def plugin_source(host: str, token_file: str, timeout: float) -> str:
    """The plugin for one run: its endpoint, the token's file, and how long an ask may wait."""
    wait_ms = int((timeout + 30) * 1000)  # the host answers by `timeout`; this only ends a lost ask
    return (
        PLUGIN.replace("__HOST__", json.dumps(host))
        .replace("__TOKEN_FILE__", json.dumps(token_file))
        .replace("__WAIT_MS__", str(wait_ms))
    )
