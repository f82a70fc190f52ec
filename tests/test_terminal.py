"""What reaches a terminal: control characters an agent, a repository or a metadata value wrote
are shown, never interpreted; newline and tab stay; a path the agent chose is quoted."""

from __future__ import annotations

from pathlib import Path

from opencode_gateway.opencode.gitguard import GitControl
from opencode_gateway.terminal import quoted, shown

ESC, BEL = "\x1b", "\x07"
ATTACKS = {
    "clipboard (OSC 52)": f"{ESC}]52;c;cm0gLXJmIH4={BEL}",
    "window title (OSC 0)": f"{ESC}]0;pwned{BEL}",
    "hyperlink (OSC 8)": f"{ESC}]8;;http://evil.example{ESC}\\click{ESC}]8;;{ESC}\\",
    "clear screen (CSI)": f"{ESC}[2J{ESC}[H",
    "8-bit CSI": "\x9b2J",
    "carriage return": "done\rfailed",
}


def test_no_control_character_reaches_the_terminal_but_newline_and_tab() -> None:
    for name, attack in ATTACKS.items():
        text = shown(f"answer\n\t{attack}")
        assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in text), name
        assert text.startswith("answer\n\t")
    assert shown(f"{ESC}]0;T{BEL}") == "\\x1b]0;T\\x07"
    assert shown("naïve — ünïcode ✓") == "naïve — ünïcode ✓"  # text is text


def test_a_path_is_quoted_with_even_its_newlines_escaped() -> None:
    assert quoted(f".git/modules/{ESC}]0;TITLE{BEL}/config") == '".git/modules/\\u001b]0;TITLE\\u0007/config"'
    assert quoted("a\nb") == '"a\\nb"' and "\n" not in quoted("a\nb")


def test_the_git_guard_names_an_agent_chosen_path_quoted_and_escaped(tmp_path: Path) -> None:
    module = tmp_path / ".git" / "modules" / f"{ESC}]0;TITLE{BEL}"
    module.mkdir(parents=True)
    (module / "config").write_text("[core]\n")
    before = GitControl.take(tmp_path)
    (module / "config").write_text("[core]\n\tfsmonitor = touch /tmp/pwned\n")
    [warning] = before.restore("run_1")
    assert ESC not in warning and BEL not in warning
    assert '".git/modules/\\u001b]0;TITLE\\u0007/config"' in warning
    assert (module / "config").read_text() == "[core]\n"
