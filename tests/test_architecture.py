"""The shape of the package, as a newcomer relies on it: small units, layers that import one way,
and run options a type checker checks."""

from __future__ import annotations

import ast
import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "opencode_gateway"
MAX_CLASS_LINES, MAX_FUNCTION_LINES = 150, 60


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(
    name: str, path: Path, modules: dict[str, Path], *, bodies: bool = False, only_bodies: bool = False
) -> set[str]:
    """The package's modules `name` imports at its top level, type-only imports included; with
    `bodies` those inside its functions too, with `only_bodies` those alone."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` counts: a cycle of types is a cycle
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
                for alias in node.names:
                    found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)

    tree = ast.parse(path.read_text())
    if only_bodies:
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        visit([n for f in functions for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))])
    else:
        visit([n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))] if bodies else tree.body)
    return (found & set(modules)) - {name}


MAX_TOP_LEVEL_MODULES = 12


def _unit(name: str) -> str:
    """The part of the package a module belongs to: its subpackage (`runs/`) or, at the top, itself."""
    parts = name.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()):
        return parts[1] + "/"
    return parts[1] if len(parts) == 2 else "opencode_gateway"


def _declared(package: Path, units: set[str]) -> set[str] | None:
    """What a subpackage's docstring says it may import (its `May import:` paragraph, up to a
    "Never")."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    found = re.search(r"^May import: (.*?)(?:\n\n|\Z)", doc, re.M | re.S)
    if found is None:
        return None
    allowed = found.group(1).split("Never")[0]  # what follows "Never" is what it may not import
    words = set(re.findall(r"[\w]+/?", allowed))
    return units if "everything" in words else words & units


def test_the_top_holds_at_most_12_modules_and_every_subpackage_says_what_it_owns_and_may_import() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top
    modules = _modules()
    units = {_unit(name) for name in modules}
    graph = {name: _imports(name, path, modules, bodies=True) for name, path in modules.items()}
    undeclared, beyond = [], []
    for package in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").exists()):
        allowed = _declared(package, units)
        if allowed is None:
            undeclared.append(package.name)
            continue
        unit = package.name + "/"
        for name, imported in graph.items():
            if _unit(name) == unit:  # domain.py: the values every part speaks of, importing nothing
                beyond += [f"{name} imports {i}" for i in imported if _unit(i) not in {unit, "domain", *allowed}]
    assert undeclared == [] and beyond == []


# Own modules imported inside a function, outside the CLI's per-command dispatch (cli/) and the
# package's lazy `__getattr__`: each with why it waits. A run starts OpenCode first and imports
# its endpoint's machinery (starlette, uvicorn, httpx: ~0.3 s) while OpenCode boots.
DEFERRED_IMPORTS = {
    ("opencode_gateway.observability.traces", "opencode_gateway.observability._otel"): "the otel extra, maybe absent",
    ("opencode_gateway.runs.assembly", "opencode_gateway.endpoint.app"): "starlette, while OpenCode starts",
    ("opencode_gateway.runs.assembly", "opencode_gateway.endpoint.routing"): "starlette, while OpenCode starts",
    ("opencode_gateway.runs.assembly", "opencode_gateway.approvals.host"): "starlette, only for a run that asks",
    ("opencode_gateway.runs.preflight", "opencode_gateway.litellm_gateway.preflight"): "httpx, while OpenCode starts",
    ("opencode_gateway.runs.wiring", "opencode_gateway.endpoint.upstream"): "httpx, while OpenCode starts",
}


def test_no_own_module_is_imported_inside_a_function_but_the_deferred_ones() -> None:
    """An import hidden in a function hid a circle (plan -> runner -> assembly -> plan)."""
    modules = _modules()
    hidden = {
        (name, imported)
        for name, path in modules.items()
        if not name.startswith("opencode_gateway.cli") and name != "opencode_gateway"
        for imported in _imports(name, path, modules, only_bodies=True)
    }
    assert hidden == set(DEFERRED_IMPORTS)


MAX_COMPLEXITY = 15


def test_no_function_is_above_cyclomatic_complexity_15() -> None:
    """As radon counts it: one branch more than a reader holds at once is a function to split."""
    from radon.complexity import cc_visit
    from radon.visitors import Function

    complex_ = sorted(
        {
            f"{path.relative_to(PACKAGE)}: {block.fullname} ({block.complexity})"
            for path in PACKAGE.rglob("*.py")
            for block in cc_visit(path.read_text())
            for block in ([block, *block.methods] if not isinstance(block, Function) else [block])
            if isinstance(block, Function) and block.complexity > MAX_COMPLEXITY
        }
    )
    assert complex_ == []


def test_no_class_is_over_150_lines_and_no_function_over_60() -> None:
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            limit = MAX_CLASS_LINES if isinstance(node, ast.ClassDef) else MAX_FUNCTION_LINES
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    too_long.append(f"{path.relative_to(PACKAGE)}: {node.name} ({length} lines)")
    assert too_long == []


def test_no_import_cycle_even_of_types_or_inside_functions() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules, bodies=True) for name, path in modules.items()}
    cycles = []
    for start in graph:  # a module that can reach itself through its imports is in a cycle
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == start:
                cycles.append(start)
                break
            if name not in seen:
                seen.add(name)
                todo.extend(graph[name])
    assert cycles == []


def test_layers_import_one_way() -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    assert not {i for i in graph["opencode_gateway.serve.server"] if i == "opencode_gateway.runs.runner"}
    for name, imported in graph.items():
        if name.startswith("opencode_gateway.accounting"):  # knows nothing of OpenCode or HTTP
            assert not {i for i in imported if i.startswith(("opencode_gateway.opencode", "opencode_gateway.endpoint"))}
        if name.startswith("opencode_gateway.opencode"):  # knows nothing of forwarding
            assert not {i for i in imported if i.startswith("opencode_gateway.endpoint")}, name
        if name.startswith("opencode_gateway.dashboard"):  # a file, no server
            assert not {i for i in imported if i.startswith(("opencode_gateway.endpoint", "opencode_gateway.serve"))}


PROBE = """
from opencode_gateway import run

run("x", model="m", modle=1)
run("x", model="m", max_cost="lots")
run("x", model="m", max_cost=None, workdir=".", tags=["a"])
"""


@pytest.mark.e2e  # mypy on the package takes seconds
def test_a_type_checker_rejects_a_misspelt_option_and_a_wrong_type(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(probe)],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = [line for line in checked.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 2, checked.stdout
    assert ':4: error: Unexpected keyword argument "modle"' in errors[0]
    assert ':5: error: Argument "max_cost" to "run" has incompatible type "str"' in errors[1]


def test_the_gateway_prefix_is_spelled_in_one_place() -> None:
    """`litellm_proxy/` as a value (not in a message) is GATEWAY_PREFIX, written once."""
    spelled = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value == "litellm_proxy/"
    ]
    assert spelled == ["domain.py"]


def test_a_model_string_is_parsed_by_model_route_alone() -> None:
    """Which way a model goes and its group's name come from ModelRoute: no module but
    domain.py reads GATEWAY_PREFIX (each that did re-parsed the string its own way)."""
    reading = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name) and node.id == "GATEWAY_PREFIX"
    )
    assert set(reading) == {"domain.py"}


def test_how_a_run_ended_what_a_request_was_for_and_the_mode_are_types_mypy_checks() -> None:
    from typing import get_args

    from opencode_gateway.domain import Mode, Purpose, RunOutcome, StopReason
    from opencode_gateway.runs.result import RunResult

    assert get_args(StopReason) == ("done", "error", "timeout", "budget_exceeded", "max_turns")
    assert set(get_args(RunOutcome)) == {*get_args(StopReason), "interrupted"}
    assert get_args(Purpose) == ("main", "title", "summary", "compaction") and get_args(Mode) == ("gateway", "sdk")
    fields = {field.name: field.type for field in dataclasses.fields(RunResult)}
    assert fields["stop_reason"] == "StopReason" and fields["mode"] == "Mode"


def test_opencode_and_endpoint_do_not_import_settings() -> None:
    """They take what they need (a protocol, or values); config/settings.py composes them, at the top."""
    modules = _modules()
    importing = sorted(
        name
        for name, path in modules.items()
        if name.startswith(("opencode_gateway.opencode", "opencode_gateway.endpoint"))
        and "opencode_gateway.config.settings" in _imports(name, path, modules)
    )
    assert importing == []


def test_no_module_is_over_400_lines() -> None:
    """A module a newcomer reads in one sitting (cli.py was 718 lines, runner.py 574)."""
    long = sorted(
        f"{path.relative_to(PACKAGE)} ({lines} lines)"
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > 400
    )
    assert long == []


def test_the_ledgers_sql_lives_in_the_ledger_package() -> None:
    """Every query of the ledger's tables is under accounting/ledger/ (report.py, dashboard/data.py
    and reconcile.py held SQL of their own, passed between modules as strings)."""
    tables = re.compile(r"\b(FROM|INTO|UPDATE|JOIN)\s+(runs|requests)\b")
    holding = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if "accounting/ledger/" not in path.as_posix()
        and any(
            isinstance(node, ast.Constant) and isinstance(node.value, str) and tables.search(node.value)
            for node in ast.walk(ast.parse(path.read_text()))
        )
    )
    assert holding == []


def test_end_to_end_tests_live_under_tests_e2e_each_file_marked() -> None:
    """The fast tier (`pytest`) is every test outside tests/e2e/; the end-to-end ones (real
    OpenCode, proxy, Ray, browser, terminal) are marked per file there, so `-m e2e` finds them all."""
    tests = Path(__file__).parent
    unmarked = [
        str(path.relative_to(tests))
        for path in (tests / "e2e").rglob("test_*.py")
        if "pytestmark = pytest.mark.e2e" not in path.read_text()
        and "pytestmark = [pytest.mark.e2e" not in path.read_text()
    ]
    assert unmarked == []
    marked_elsewhere = sorted(
        str(path.relative_to(tests))
        for path in tests.rglob("test_*.py")
        if "e2e" not in path.relative_to(tests).parts and "mark.e2e" in path.read_text()
    )
    assert marked_elsewhere == ["test_architecture.py"]  # mypy over a probe file: slow, not end to end


def test_tests_use_the_package_through_its_public_names() -> None:
    """A test that imports a private name pins an implementation detail: what it tests is public."""
    tests = Path(__file__).parent
    private = sorted(
        f"{path.relative_to(tests)}: {alias.name}"
        for path in tests.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("opencode_gateway")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__") and alias.name != "_litellm"
    )
    assert private == []
