"""What a run tells its CI job (cli/ci.py): figures as KEY=value lines, a summary and a comment
that show what the ledger holds as text, never as markup."""

from __future__ import annotations

from pathlib import Path

from opencode_gateway.cli.ci import Figures, report_to_ci
from opencode_gateway.config.settings import Settings

HOSTILE = "ENG-1 | <img src=x onerror=alert(1)> [x](http://evil) -->\nrun_id=forged"


def figures(**fields: object) -> Figures:
    values: dict[str, object] = {
        "kind": "run", "id": "run_1", "stop_reason": "done", "model": "litellm_proxy/coder", "requests": 3,
        "refused": 2, "input_tokens": 1200, "output_tokens": 40, "cost": 0.1 + 0.2,
    }  # fmt: skip
    return Figures(**{**values, **fields})  # type: ignore[arg-type]


def test_outside_ci_nothing_is_written(tmp_path: Path) -> None:
    report_to_ci(figures(), Settings(data_dir=tmp_path), environ={"GITHUB_OUTPUT": str(tmp_path / "out")})
    assert list(tmp_path.iterdir()) == []


def test_a_dotenv_file_gets_the_figures_as_lines_without_float_noise(tmp_path: Path) -> None:
    dotenv = tmp_path / "gateway.env"  # GitLab's dotenv report
    report_to_ci(figures(), Settings(data_dir=tmp_path), environ={"OPENCODE_GATEWAY_OUTPUTS": str(dotenv)})
    assert dotenv.read_text().splitlines() == [
        "run_id=run_1", "stop_reason=done", "requests=3", "refused=2", "input_tokens=1200", "output_tokens=40",
        "cost_usd=0.3",
    ]  # fmt: skip
    report_to_ci(figures(cost=None), Settings(data_dir=tmp_path), environ={"OPENCODE_GATEWAY_OUTPUTS": str(dotenv)})
    assert dotenv.read_text().splitlines()[-1] == "cost_usd="  # unknown, never a made-up 0


def test_a_hostile_ticket_is_text_in_the_summary_and_the_comment_and_forges_no_output(tmp_path: Path) -> None:
    environ = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_OUTPUT": str(tmp_path / "out"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "RUNNER_TEMP": str(tmp_path / "runner"),
    }
    settings = Settings(data_dir=tmp_path, metadata={"ticket": HOSTILE}, ledger=tmp_path / "none.db")
    report_to_ci(figures(), settings, environ=environ)
    lines = (tmp_path / "out").read_text().splitlines()
    assert [line.split("=", 1)[0] for line in lines].count("run_id") == 1  # no line of the ticket's own
    comment = Path(dict(line.split("=", 1) for line in lines)["comment_file"]).read_text()
    summary = (tmp_path / "summary.md").read_text()
    for text in (summary, comment):
        assert "<img" not in text and "&lt;img" in text and "\\[x\\](http" in text and "\\|" in text  # escaped
        assert "the ledger could not be read" in text  # said, not raised: the run is not failed for it
    assert comment.splitlines()[0].startswith("<!-- opencode-gateway ticket ") and comment.count("-->") == 1
