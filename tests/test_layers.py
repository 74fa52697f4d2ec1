"""The package's architecture, checked: imports point one way, no circle, no import hidden in a function.

Layers, lowest first: the shared vocabulary (gaccum_core's own modules: config, states, ...) ← models,
data ← train ← runs, plan, lab ← sweeps ← views ← cli. A module may import its own package and the layers
below; siblings of one layer (runs, plan, lab) do not import each other. A package's __init__ is its
docstring alone: a name is imported from the module that defines it, and a private name stays in its package.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gaccum_core"
LAYERS = {"": 0, "models": 1, "data": 1, "train": 2, "runs": 3, "plan": 3, "lab": 3, "sweeps": 4, "views": 5,
          "cli": 6}
ENTRY_POINTS = {"gaccum_core.__main__"}  # `python -m gaccum_core` runs the CLI: it sits above every layer


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(module: str) -> str:
    """'train' for gaccum_core.train.engine; '' for the vocabulary (gaccum_core.config)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else ""


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported gaccum_core module, line, inside a function) for each import of ours in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.module and child.module.startswith("gaccum_core"):
                for alias in child.names:
                    candidate = f"{child.module}.{alias.name}"
                    is_module = (PACKAGE.parent / (candidate.replace(".", "/") + ".py")).exists() or \
                        (PACKAGE.parent / candidate.replace(".", "/")).is_dir()
                    found.append((candidate if is_module else child.module, child.lineno, in_function))
            elif isinstance(child, ast.Import):
                found.extend((a.name, child.lineno, in_function) for a in child.names if a.name.startswith("gaccum_core"))
            visit(child, nested)

    visit(tree, False)
    return found


def _private_imports(path: Path, here: str) -> list[tuple[str, int, str]]:
    """(gaccum_core module, line, name) for each `_name` the file, in package `here`, imports from another."""
    return [(node.module, node.lineno, alias.name) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gaccum_core"
            and _package(node.module) != here for alias in node.names if alias.name.startswith("_")]


def _beyond_docstring(path: Path) -> list[int]:
    """The lines of the statements a package's __init__ holds besides its docstring."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return [node.lineno for node in body]


def _graph() -> dict[str, list[tuple[str, int, bool]]]:
    return {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_layers_are_the_packages_on_disk():
    on_disk = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert on_disk == set(LAYERS) - {""}


def test_imports_point_down_the_layers():
    wrong = []
    for module, imports in _graph().items():
        if module in ENTRY_POINTS:
            continue
        here = _package(module)
        for target, line, _ in imports:
            there = _package(target)
            if there != here and (LAYERS[there] >= LAYERS[here]):
                wrong.append(f"{module}:{line} imports {target} ({there or 'vocabulary'} is not below "
                             f"{here or 'vocabulary'})")
    assert not wrong, "\n".join(wrong)


def test_no_import_of_ours_inside_a_function():
    hidden = [f"{module}:{line} imports {target}" for module, imports in _graph().items()
              for target, line, in_function in imports if in_function]
    assert not hidden, "\n".join(hidden)


def test_no_import_circle():
    graph = {m: {t for t, _, _ in imports if t != m} for m, imports in _graph().items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            pytest.fail("import circle: " + " -> ".join(path[path.index(module):] + [module]))
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, path + [module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_the_check_sees_a_wrong_import(tmp_path):
    """The walk is not vacuous: it finds this file's own imports of ours, and would flag one pointing up."""
    graph = _graph()
    assert any(t.startswith("gaccum_core.train.") for t, _, _ in graph["gaccum_core.runs.execute"])
    probe = tmp_path / "probe.py"
    probe.write_text("from gaccum_core.cli import build_parser\ndef f():\n    from gaccum_core.runs import runner\n")
    assert [(t, in_function) for t, _, in_function in _imports(probe)] == [
        ("gaccum_core.cli", False), ("gaccum_core.runs.runner", True)]
    assert LAYERS[_package("gaccum_core.cli")] > LAYERS[_package("gaccum_core.train.engine")]


def test_a_package_init_is_its_docstring_alone():
    inits = sorted(PACKAGE.rglob("__init__.py"))
    assert {PACKAGE / name / "__init__.py" for name in LAYERS} <= set(inits)  # each layer's
    extra = [f"{init.relative_to(ROOT)}:{line}" for init in inits for line in _beyond_docstring(init)]
    assert not extra, "a package's __init__ is its docstring; import from the defining module:\n" + "\n".join(extra)


def test_no_private_name_imported_across_packages():
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {name} from {module}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for module, line, name in _private_imports(path, _package(_module_name(path)))]
    assert not wrong, "\n".join(wrong)


def test_the_checks_see_a_facade_and_a_private_import(tmp_path):
    """Neither check is vacuous: each flags a file that breaks its rule, and lets one that keeps it pass."""
    init = tmp_path / "__init__.py"
    init.write_text('"""The package."""\n')
    assert _beyond_docstring(init) == []
    init.write_text('"""The package."""\n\nfrom gaccum_core.data.load import load_data\n__all__ = ["load_data"]\n')
    assert _beyond_docstring(init) == [3, 4]
    probe = tmp_path / "probe.py"
    probe.write_text("from gaccum_core.data.images import _digits, digits_split\nfrom gaccum_core.config import _check\n")
    assert _private_imports(probe, "train") == [("gaccum_core.data.images", 1, "_digits"),
                                                ("gaccum_core.config", 2, "_check")]
    assert _private_imports(probe, "data") == [("gaccum_core.config", 2, "_check")]  # its own package's: allowed
