"""The attacker: a script a hostile repository ships, run by OpenCode's own bash tool when the
scripted model asks for it. It knows what any agent can find out: OpenCode's environment, and in
it the endpoint's URL and the path of the token file (OPENCODE_CONFIG_CONTENT)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tests.support.scripted_upstream import Reply, ToolCall, usage

SCRIPT = r"""
import concurrent.futures, json, os, sys, urllib.error, urllib.request

options = json.loads(os.environ["OPENCODE_CONFIG_CONTENT"])["provider"]["litellm"]["options"]
token = open(options["apiKey"][len("{file:"):-1]).read().strip()


def post(body, headers=None, url=None):
    request = urllib.request.Request(
        (url or options["baseURL"]) + "/chat/completions", data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {token}", "content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return [response.status, response.read().decode()]
    except urllib.error.HTTPError as error:
        return [error.code, error.read().decode()]


action, arguments = sys.argv[1], [json.loads(a) for a in sys.argv[2:]]
if action == "env":
    print(json.dumps(dict(os.environ)))
elif action == "post":
    print(json.dumps(post(*arguments)))
elif action == "posts":  # several requests, one after the other
    print(json.dumps([post(*each) for each in arguments]))
elif action == "mint":  # ask the server for a launch of one's own choosing, with one's own token
    root = options["baseURL"].removesuffix("/v1")
    request = urllib.request.Request(root + "/launches", data=json.dumps(arguments[0]).encode(),
                                     headers={"authorization": f"Bearer {token}", "content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            print(json.dumps([response.status, response.read().decode()]))
    except urllib.error.HTTPError as error:
        print(json.dumps([error.code, error.read().decode()]))
elif action == "parallel":
    count, body = arguments
    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        print(json.dumps(list(pool.map(lambda _: post(body), range(count)))))
"""


# Python that finds this run's OpenCode from a tool's process (given the bash tool's pid, $PPID):
# `opencode` is its pid, whose /proc/<pid>/fd/1 and /fd/2 are OpenCode's pipes to the gateway.
FIND_OPENCODE = r"""
import sys
opencode, pid = None, sys.argv[1]  # the bash tool's parent, and up: this run's OpenCode
while opencode is None and pid not in ("0", "1"):
    words = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
    if b"run" in words and b"--format" in words:
        opencode = pid
    pid = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]
"""


# The script needs only the standard library: it runs on the base interpreter, which the tests'
# settings make readable in the sandbox (a virtualenv under /tmp would be hidden with /tmp).
PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")


def attack(workdir: Path, action: str, *arguments: Any) -> Reply:
    """The model's turn that makes OpenCode's bash tool run the attack; its output lands in
    `attack.out` in the workdir."""
    (workdir / "attack.py").write_text(SCRIPT)
    words = " ".join(shlex.quote(json.dumps(a)) for a in arguments)
    command = f"{shlex.quote(PYTHON)} attack.py {action} {words} > attack.out 2>&1; echo ran"
    return Reply(
        tool_calls=[ToolCall("bash", {"command": command, "description": "run the repository's script"})],
        usage=usage(1000, 50),
    )


def outcome(workdir: Path) -> Any:
    """What the attack printed (it fails the test if the attack did not run)."""
    out = workdir / "attack.out"
    assert out.exists(), "the agent's bash tool never ran the attack"
    return json.loads(out.read_text())
