"""A batch (a tasks file and where its work goes), its tasks and their outcomes. The tasks file:
one JSON object a line, each a task (an id that names its folder, a
prompt, and the `run()` arguments a task may set), checked whole before any task runs; an error
names the line."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.file import beside
from ..config.options import task_kinds
from ..errors import GatewayError, SettingsError
from ..runs.result import RunResult

__all__ = ["BATCH_KEYS", "FOLDER_NAME", "Batch", "Outcome", "Task", "load_tasks"]

FOLDER_NAME = re.compile(r"^(?!\.\.?$)[A-Za-z0-9._-]{1,100}$")  # a plain folder name: never . or ..
# A task's keys beyond id and prompt, and their types; each is the `run()` argument of that name.
_OPTIONS = task_kinds()  # what a task may set, and the JSON types each is written as
BATCH_KEYS = ("batch_id", "task_id")  # metadata the batch sets on every run


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    options: Mapping[str, Any] = field(default_factory=dict)  # run() arguments
    template: Path | None = None  # a folder the task's fresh workdir starts as a copy of


def _task(raw: Any, where: str, tasks_file: Path) -> Task:
    if not isinstance(raw, dict):
        raise SettingsError(f"{where}: a task is a JSON object with an id and a prompt")
    unknown = sorted(set(raw) - {"id", "prompt", *_OPTIONS})
    if unknown:
        raise SettingsError(f"{where}: unknown key {unknown[0]!r}; a task may have id, prompt, {', '.join(_OPTIONS)}")
    task_id, prompt = raw.get("id"), raw.get("prompt")
    if not isinstance(task_id, str) or not FOLDER_NAME.match(task_id):
        raise SettingsError(
            f"{where}: id {task_id!r} is invalid: use letters, digits, . _ - (it names a folder, so not . or ..)"
        )
    if not isinstance(prompt, str) or not prompt.strip():
        raise SettingsError(f"{where}: task {task_id} has no prompt")
    options = _options(raw, where)
    if "skills" in options:  # folders named in the tasks file are found beside it
        options["skills"] = beside(tasks_file, options["skills"])
    template = options.pop("workdir", None)
    template_dir = None if template is None else Path(beside(tasks_file, [template])[0]).resolve()
    if template_dir is not None and not template_dir.is_dir():
        raise SettingsError(f"{where}: workdir {template_dir} is not a folder")
    return Task(task_id, prompt, options, template_dir)


def _options(raw: dict[str, Any], where: str) -> dict[str, Any]:
    """The run() arguments a task sets, each of its kind; none of the metadata keys the batch sets."""
    options: dict[str, Any] = {}
    for key, kinds in _OPTIONS.items():
        value = raw.get(key)
        if value is None:
            continue
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise SettingsError(f"{where}: {key} must be {' or '.join(k.__name__ for k in kinds)}")
        options[key] = value
    for key in BATCH_KEYS:
        if key in options.get("metadata", {}):
            raise SettingsError(f"{where}: metadata {key} is set by the batch itself: rename that key")
    return options


def load_tasks(path: Path) -> tuple[Task, ...]:
    """Every task of a JSONL file; SettingsError names the first bad line."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read the tasks file {path}: {exc.strerror}") from None
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        bad = data[: exc.start].count(b"\n") + 1
        raise SettingsError(f"{path} line {bad}: not UTF-8 text (byte {exc.start}): save the file as UTF-8") from None
    tasks: dict[str, Task] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{where}: not JSON ({exc.msg})") from None
        try:
            json.dumps(raw, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, escaped (\\udce9): no database or header takes it
            raise SettingsError(f"{where}: holds a \\uXXXX escape that is not UTF-8 text (a lone surrogate)") from None
        task = _task(raw, where, path)
        if task.id in tasks:
            raise SettingsError(f"{where}: task id {task.id} is used twice")
        tasks[task.id] = task
    if not tasks:
        raise SettingsError(f'{path} holds no tasks: one JSON object a line, e.g. {{"id": "t1", "prompt": "..."}}')
    return tuple(tasks.values())


@dataclass(frozen=True)
class Batch:
    """A tasks file and where its work goes."""

    tasks_file: Path
    batch_id: str
    workdir_root: Path
    results_file: Path

    @classmethod
    def of(
        cls,
        tasks_file: Path,
        *,
        batch_id: str | None = None,
        workdir_root: Path | None = None,
        results_file: Path | None = None,
    ) -> Batch:
        """Defaults beside the tasks file; the batch id is stable for a file, so --resume finds it."""
        path = tasks_file.resolve()
        stem = path.stem
        default_id = f"{stem}-{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        if batch_id is not None and not FOLDER_NAME.match(batch_id):
            raise SettingsError(f"batch id {batch_id!r} is invalid: use letters, digits, . _ - (not . or ..)")
        return cls(
            path,
            batch_id or default_id,
            (workdir_root or path.parent / f"{stem}.work").resolve(),
            (results_file or path.parent / f"{stem}.results.jsonl").resolve(),
        )


@dataclass(frozen=True)
class Outcome:
    """One task's end: its RunResult, or the error that kept it from running."""

    task_id: str
    result: RunResult | None
    error: GatewayError | None = None

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.ok

    def to_dict(self) -> dict[str, Any]:
        if self.result is not None:
            return {"task_id": self.task_id, **self.result.to_dict(events=False)}
        error = self.error.to_dict() if self.error else None
        return {"task_id": self.task_id, "stop_reason": "error", "error": error}
