"""The demo run: the real OpenCode, through opencode-gateway in SDK mode, doing a small coding task.

The model is a scripted stand-in (tests/support/scripted_upstream.py): there is no real LLM here. It
plays a three-turn session (write fizzbuzz.py, run it, report) with realistic token usage, so the
printed cost is LiteLLM's real price for openai/gpt-4o-mini on those tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the scripted model server is the tests' (tests/support)
from tests.support.scripted_upstream import Reply, ScriptedUpstream, ToolCall, usage  # noqa: E402

DATA_DIR = ROOT / ".demo"  # the demo's own data dir and ledger, never the user's
PACE = 0.05  # seconds between the stand-in's chunks: a model's pace, so the live view has something to show
PROGRAM = (
    "for n in range(1, 16):\n"
    '    print("FizzBuzz" if n % 15 == 0 else "Fizz" if n % 3 == 0 else "Buzz" if n % 5 == 0 else n)\n'
)


def last_tool_output(body: dict[str, Any]) -> str:
    tool_messages = [m for m in body["messages"] if m.get("role") == "tool"]
    content = tool_messages[-1]["content"] if tool_messages else ""
    return content if isinstance(content, str) else json.dumps(content)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", help="where OpenCode works (default: a new temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the RunResult as JSON")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="opencode-gateway-demo-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OPENCODE_GATEWAY_HOME": str(DATA_DIR)}
    if not env.get("OPENCODE_BIN"):  # the OpenCode scripts/setup installed, outside the demo's data dir
        done = subprocess.run(
            [sys.executable, "-m", "opencode_gateway", "install-opencode"], capture_output=True, text=True, check=True
        )
        env["OPENCODE_BIN"] = done.stdout.strip()
    target = workdir / "fizzbuzz.py"

    model = ScriptedUpstream().start()
    model.script(
        Reply(
            text="I'll write the program first.",
            tool_calls=[ToolCall("write", {"filePath": str(target), "content": PROGRAM})],
            usage=usage(10_450, 118),
            chunk_delay=PACE,
        ),
        Reply(
            text="Now let me run it.",
            tool_calls=[ToolCall("bash", {"command": "python3 fizzbuzz.py", "description": "Run fizzbuzz.py"})],
            usage=usage(10_702, 41, cached=10_240),
            chunk_delay=PACE,
        ),
        lambda body: Reply(
            text="fizzbuzz.py is written and works. Its output:\n\n" + last_tool_output(body).strip(),
            usage=usage(10_935, 64, cached=10_624),
            chunk_delay=PACE,
        ),
    )
    print(f"[demo] stand-in model (scripted, not an LLM) at {model.url}", file=sys.stderr)
    print(
        "[demo] in a terminal, the run shows its text, tool calls, requests and cost as it goes (-q: quiet)",
        file=sys.stderr,
    )
    kept = "" if args.workdir else " (removed at the end; --workdir DIR keeps it)"
    print(f"[demo] OpenCode works in {workdir}{kept}", file=sys.stderr)
    command = [
        sys.executable,
        "-m",
        "opencode_gateway",
        "run",
        "-m",
        "openai/gpt-4o-mini",
        "--api-base",
        model.url,
        "--api-key",
        "sk-demo-not-a-real-key",
        "--workdir",
        str(workdir),
        "--permissions",
        "full",
        "--metadata",
        "ticket=DEMO-1",
        *(["--json"] if args.json else []),
        "Write fizzbuzz.py printing FizzBuzz for 1 to 15, run it and show me the output",
    ]
    try:
        code = subprocess.run(command, env=env).returncode
    finally:
        model.stop()
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    ledger = DATA_DIR / "ledger.db"
    print(
        f"[demo] this run is in the demo's own ledger {ledger.relative_to(ROOT)}: see it with "
        f"`.venv/bin/opencode-gateway report --ledger {ledger.relative_to(ROOT)} --by run`",
        file=sys.stderr,
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
