"""docs/architecture.md's hand-written tables checked against what they describe: the table of where a module
without its own test file is tested (against the tree) and the layers table (against the import contract in
pyproject.toml), so that neither goes stale when a module or a test file comes or goes; and the stages' import rule,
from their records in pipeline/stages.py. Also rules of the whole code: its length, and torch.load's safe mode."""

from __future__ import annotations

import ast
import re

import grimp
import tomllib

from pipeline import stages
from tests.helpers import ROOT

PAGE = ROOT / "docs" / "architecture.md"


def section(title: str) -> str:
    return PAGE.read_text(encoding="utf-8").split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def table_rows(text: str) -> list[list[list[str]]]:
    """The body rows of the first table in `text`, each cell as the backticked names in it."""
    rows = [line for line in text.splitlines() if line.startswith("|")][2:]
    return [[re.findall(r"`([^`]+)`", cell) for cell in row.strip("|").split("|")] for row in rows]


def own_test(module: str):
    """tests/<package>/test_<name>.py of pipeline/<package>/<name>.py."""
    path = ROOT / "tests" / module
    return path.with_name(f"test_{path.name}")


def test_the_modules_tested_elsewhere_are_those_without_their_own_test_file() -> None:
    listed: dict[str, list[str]] = {}
    for modules, tests in table_rows(section("Where a module without its own test file is tested")):
        listed.update(dict.fromkeys(modules, tests))
    for module, tests in listed.items():
        assert (ROOT / "pipeline" / module).is_file(), f"{module}: no such module"
        assert not own_test(module).is_file(), f"{module} has {own_test(module).relative_to(ROOT)}: drop its row"
        assert tests and all((ROOT / "tests" / t).is_file() for t in tests), f"{module}: {tests}"
    modules = [str(p.relative_to(ROOT / "pipeline")) for p in (ROOT / "pipeline").rglob("*.py")]
    untested = {m for m in modules if not m.split("/")[-1].startswith("__") and not own_test(m).is_file()}
    assert untested == set(listed), f"not in the table: {sorted(untested - set(listed))}"


def test_the_layers_table_is_the_import_contract_s_order() -> None:
    layers = [m.strip() for line in contract()["layers"] for m in line.split("|")]
    shown = [name.rstrip("/") for row in table_rows(section("Layers")) for name in row[0]]
    assert shown == [m.removeprefix("pipeline.") for m in layers]


def contract() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]


def drivers() -> set[str]:
    """The modules that run other stages: the import contract's top layer."""
    return {m.strip() for m in contract()["layers"][0].split("|")}


def test_every_driver_stage_is_in_the_contract_s_top_layer_and_no_other_stage_is() -> None:
    assert {s.module for s in stages.STAGES if s.driver} <= drivers()
    assert not drivers() & {s.module for s in stages.STAGES if not s.driver}


def stage_imports(graph) -> list[str]:
    """Each import of a stage's module by a module that may not make it: only a driver (the import contract's top
    layer) imports a stage, and nothing imports a driver."""
    top = drivers()
    ordinary = {s.module for s in stages.STAGES} - top
    return [
        f"{importer} imports {module}"
        for module in sorted(ordinary | top)
        for importer in sorted(graph.find_modules_that_directly_import(module))
        if module in top or importer not in top
    ]


def test_only_a_driver_imports_a_stage_and_nothing_imports_a_driver() -> None:
    # the stage layer of the import contract, read from pipeline/stages.py rather than listed in pyproject.toml
    graph = grimp.build_graph("pipeline")
    assert stage_imports(graph) == []
    graph.add_import(importer="pipeline.core.loop", imported="pipeline.cv")  # a lower layer reaching a stage
    graph.add_import(importer="pipeline.blend", imported="pipeline.board")  # a stage importing another
    graph.add_import(importer="pipeline.kaggle.kernels", imported="pipeline.stage1")  # a driver imported
    assert stage_imports(graph) == [
        "pipeline.blend imports pipeline.board",
        "pipeline.core.loop imports pipeline.cv",
        "pipeline.kaggle.kernels imports pipeline.stage1",
    ]


MODULE_LINES, FUNCTION_LINES = 500, 60  # the most a module and a function may hold, so that a change reads short


def test_no_module_and_no_function_is_too_long_to_read() -> None:
    long = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        if len(text.splitlines()) > MODULE_LINES:
            long.append(f"{name}: {len(text.splitlines())} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long.append(f"{name}: {node.name} is {lines} lines")
    assert not long, f"split by concern (at most {MODULE_LINES} lines a module, {FUNCTION_LINES} a function): {long}"


def torch_loads(text: str) -> list[ast.Call]:
    """The calls `torch.load(...)` in Python source."""
    return [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.load"
    ]


def safe(call: ast.Call) -> bool:
    return any(k.arg == "weights_only" and ast.unparse(k.value) == "True" for k in call.keywords)


def test_every_torch_load_reads_weights_only() -> None:
    """A file torch.load reads may come from elsewhere (another user's kernel output): read with weights_only=True,
    never by plain pickle, which runs whatever code the file names. docs/export.md's loader too."""
    unsafe = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        calls = torch_loads(path.read_text(encoding="utf-8"))
        unsafe += [f"{path.relative_to(ROOT)}:{c.lineno}" for c in calls if not safe(c)]
    page = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    loader = torch_loads(page.split("<!-- loader -->\n```python\n", 1)[1].split("```", 1)[0])
    assert loader, "docs/export.md's loader no longer reads head.pt with torch.load: update this test"
    unsafe += [f"docs/export.md loader:{c.lineno}" for c in loader if not safe(c)]
    assert not unsafe, f"torch.load without weights_only=True: {unsafe}"
