"""What a run or a batch tells the CI job it ran in, with no step of the job's own: its figures as
KEY=value lines (GitHub's `$GITHUB_OUTPUT` in GitHub Actions; any file, a GitLab dotenv report,
named by `OPENCODE_GATEWAY_OUTPUTS`), and in GitHub Actions a markdown summary
(`$GITHUB_STEP_SUMMARY`: the run, and its ticket's total so far from the ledger) and a file ready to
post as a pull request's comment. That file is one per ticket, and its first line names the ticket
in a marker a poster finds again, so a job updates the ticket's comment instead of adding one.

Only figures and ids are written as values (no text an agent or a model wrote); what a person reads
in the summary and the comment is escaped as report's markdown is. Reporting never fails a run: a
file that cannot be written or a ledger that cannot be read is one warning line."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..accounting.pricing import usd
from ..accounting.report import Group, build_report, markdown_cell
from ..errors import GatewayError
from ..terminal import shown

if TYPE_CHECKING:
    from ..batch.tasks import Outcome
    from ..config.settings import Settings
    from ..runs.result import RunResult

__all__ = ["Figures", "batch_figures", "report_to_ci", "run_figures"]

TICKET_KEY = "ticket"  # the metadata key whose total so far a summary and a comment give


@dataclass(frozen=True)
class Figures:
    """What a job step reports of one run or one batch."""

    kind: str  # "run" or "batch"
    id: str  # the run id, or the batch id
    stop_reason: str  # a run's; a batch's is "done" when every task was
    model: str
    requests: int
    refused: int
    input_tokens: int
    output_tokens: int
    cost: float | None  # None when a request could not be priced
    tasks: int = 1
    failed: int = 0

    def outputs(self) -> dict[str, str]:
        """As KEY=value lines: each value one line of figures or ids."""
        return {
            f"{self.kind}_id": self.id,
            "stop_reason": self.stop_reason,
            "requests": str(self.requests),
            "refused": str(self.refused),
            "input_tokens": str(self.input_tokens),
            "output_tokens": str(self.output_tokens),
            "cost_usd": "" if self.cost is None else repr(usd(self.cost)),
            **({"tasks": str(self.tasks), "failed": str(self.failed)} if self.kind == "batch" else {}),
        }


def run_figures(result: RunResult) -> Figures:
    usage = result.usage
    return Figures(
        "run", result.run_id, result.stop_reason, result.model, usage.requests, usage.refused,
        usage.input_tokens, usage.output_tokens, result.cost,
    )  # fmt: skip


def batch_figures(batch_id: str, model: str, outcomes: Sequence[Outcome]) -> Figures:
    results = [o.result for o in outcomes if o.result is not None]
    costs = [r.cost for r in results]
    failed = sum(not o.ok for o in outcomes)
    return Figures(
        "batch",
        batch_id,
        "done" if not failed else "failed",
        model,
        sum(r.usage.requests for r in results),
        sum(r.usage.refused for r in results),
        sum(r.usage.input_tokens for r in results),
        sum(r.usage.output_tokens for r in results),
        None if None in costs else sum(c for c in costs if c is not None),
        len(outcomes),
        failed,
    )


def report_to_ci(figures: Figures, settings: Settings, environ: Mapping[str, str] = os.environ) -> None:
    """Write what the job's CI reads, when it runs in one (nothing otherwise)."""
    github = environ.get("GITHUB_ACTIONS") == "true"
    outputs = environ.get("OPENCODE_GATEWAY_OUTPUTS") or (environ.get("GITHUB_OUTPUT") if github else None)
    summary = environ.get("GITHUB_STEP_SUMMARY") if github else None
    if not outputs and not summary:
        return
    ticket = settings.metadata.get(TICKET_KEY)
    so_far = _so_far(settings, str(ticket)) if ticket is not None and github else None
    lines = figures.outputs()
    if github and ticket is not None:
        comment = _comment_file(environ, str(ticket))
        if _written(comment, _comment(figures, str(ticket), so_far), append=False):
            lines["comment_file"] = str(comment)
    if outputs:
        _written(Path(outputs), "".join(f"{key}={value}\n" for key, value in lines.items()), append=True)
    if summary:
        _written(Path(summary), _summary(figures, None if ticket is None else str(ticket), so_far), append=True)


def _so_far(settings: Settings, ticket: str) -> Group | str:
    """The ticket's totals in the ledger (every machine's runs, on a team ledger), or why not."""
    try:
        return build_report(settings.ledger_location, by=TICKET_KEY, where=[(TICKET_KEY, ticket)]).total
    except GatewayError as exc:
        return f"the ledger could not be read: {exc}"


def _money(cost: float | None, unpriced: int = 0) -> str:
    text = "unknown" if cost is None else f"${cost:.6f}"
    return text + (f" + {unpriced} unpriced" if unpriced and cost is not None else "")


def _row(figures: Figures) -> str:
    return (
        f"| `{markdown_cell(figures.id)}` | {markdown_cell(figures.stop_reason)} | {figures.requests} | "
        f"{figures.refused} | {figures.input_tokens:,} | {figures.output_tokens:,} | {_money(figures.cost)} |\n"
    )


def _table(figures: Figures) -> str:
    return (
        f"| {figures.kind} | outcome | requests | refused | input tokens | output tokens | cost |\n"
        "|---|---|---:|---:|---:|---:|---:|\n" + _row(figures)
    )


def _ticket_line(ticket: str, so_far: Group | str | None) -> str:
    if so_far is None:
        return ""
    if isinstance(so_far, str):
        return f"\n**{markdown_cell(ticket)} so far**: {markdown_cell(so_far)}\n"
    return (
        f"\n**{markdown_cell(ticket)} so far** (every run in the ledger): {so_far.runs} runs, "
        f"{so_far.requests} requests ({so_far.refused} refused), {_money(so_far.cost, so_far.unpriced_requests)}\n"
    )


def _summary(figures: Figures, ticket: str | None, so_far: Group | str | None) -> str:
    tasks = f" ({figures.tasks} tasks, {figures.failed} failed)" if figures.kind == "batch" else ""
    heading = f"### OpenCode on {markdown_cell(figures.model)}: {markdown_cell(figures.stop_reason)}{tasks}\n\n"
    return heading + _table(figures) + ("" if ticket is None else _ticket_line(ticket, so_far)) + "\n"


def _marker(ticket: str) -> str:
    """The comment's first line: the ticket by its digest (no text of it inside the HTML comment)."""
    return f"<!-- opencode-gateway ticket {hashlib.sha256(ticket.encode()).hexdigest()[:16]} -->"


def _comment(figures: Figures, ticket: str, so_far: Group | str | None) -> str:
    return (
        f"{_marker(ticket)}\n### Spend on {markdown_cell(ticket)}\n"
        + _ticket_line(ticket, so_far)
        + "\nThe latest:\n\n"
        + _table(figures)
    )


def _comment_file(environ: Mapping[str, str], ticket: str) -> Path:
    folder = Path(environ.get("RUNNER_TEMP") or tempfile.gettempdir()) / "opencode-gateway"
    return folder / f"comment-{hashlib.sha256(ticket.encode()).hexdigest()[:16]}.md"


def _written(path: Path, text: str, *, append: bool) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if append else "w", encoding="utf-8") as out:
            out.write(text)
    except OSError as exc:
        print(shown(f"opencode-gateway: warning: cannot write {path} for the CI job: {exc.strerror}"), file=sys.stderr)
        return False
    return True
