"""The package's architecture, checked: imports point one way, no circle, no import hidden in a function.

Layers, lowest first: the shared vocabulary (gaccum_core's own modules: config, states, ...) ← models,
data ← train ← runs, plan, lab ← tensorboard, verify ← execution ← sweeps ← views ← cli. A module may import its own package and the layers
below; siblings of one layer (runs, plan, lab) do not import each other. A package's __init__ is its
docstring alone: a name is imported from the module that defines it, and a private name stays in its package.
"""

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gaccum_core"
LAYERS = {"": 0, "models": 1, "data": 1, "train": 2, "runs": 3, "plan": 3, "lab": 3, "tensorboard": 4, "verify": 4,
          "execution": 5, "sweeps": 6, "views": 7, "cli": 8}
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
    circle = _circle({m: {t for t, _, _ in imports if t != m} for m, imports in _graph().items()})
    assert not circle, "import circle: " + " -> ".join(circle)


def _circle(graph: dict[str, set[str]]) -> list[str]:
    """The first import circle of the graph (module -> modules it imports), as the path round it; [] if none."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str]:
        if module in path:
            return path[path.index(module):] + [module]
        if module not in done:
            for target in sorted(graph.get(module, ())):
                found = visit(target, path + [module])
                if found:
                    return found
            done.add(module)
        return []

    return next((found for module in sorted(graph) if (found := visit(module, []))), [])


def test_the_check_sees_a_wrong_import(tmp_path):
    """The walk is not vacuous: it finds this file's own imports of ours, and would flag one pointing up."""
    graph = _graph()
    assert any(t.startswith("gaccum_core.train.") for t, _, _ in graph["gaccum_core.execution.execute"])
    probe = tmp_path / "probe.py"
    probe.write_text("from gaccum_core.cli import build_parser\ndef f():\n    from gaccum_core.execution import runner\n")
    assert [(t, in_function) for t, _, in_function in _imports(probe)] == [
        ("gaccum_core.cli", False), ("gaccum_core.execution.runner", True)]
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


# The dashboard around the package: app_pages/* → dashboard/ → gaccum_core. Pages and the glue never reach
# into a core module's private names, ask torch themselves, or compute tables with pandas: what they show
# comes from gaccum_core. Only the server's warm-up (dashboard/server.py) imports inside functions: torch
# and the runner load after the home page is drawn.
FRONT = {"dashboard": 1, "app_pages": 2}
LAZY_IMPORTS_ALLOWED = {"dashboard.server"}
NOT_IN_PAGES = {"torch", "pandas", "numpy"}
NOT_IN_DASHBOARD = {"torch", "numpy"}


def _front_imports(path: Path) -> list[tuple[str, tuple[str, ...], int, bool]]:
    """(module, names imported from it, line, inside a function) for every import in a front-end file."""
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom) and child.module:
                found.append((child.module, tuple(a.name for a in child.names), child.lineno, in_function))
            elif isinstance(child, ast.Import):
                found.extend((a.name, (), child.lineno, in_function) for a in child.names)
            visit(child, nested)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found


def _front_files() -> dict[str, Path]:
    files = {f"dashboard.{p.stem}": p for p in sorted((ROOT / "dashboard").glob("*.py")) if p.stem != "__init__"}
    files.update({f"app_pages.{p.stem}": p for p in sorted((ROOT / "app_pages").glob("*.py"))})
    return files


def _front_problems(name: str, path: Path) -> list[str]:
    """What in one front-end file breaks the dashboard's layering."""
    layer, problems = name.split(".")[0], []
    for module, names, line, in_function in _front_imports(path):
        top = module.split(".")[0]
        where = f"{name}:{line}"
        if top in FRONT and FRONT[top] >= FRONT[layer] and top != layer:
            problems.append(f"{where} imports {module} (the dashboard does not import the pages)")
        if top == "gaccum_core" and any(n.startswith("_") for n in names):
            problems.append(f"{where} imports a private name of {module}: {', '.join(names)}")
        if top in (NOT_IN_PAGES if layer == "app_pages" else NOT_IN_DASHBOARD):
            problems.append(f"{where} imports {top}: what a page shows comes from gaccum_core")
        if in_function and (top in FRONT or top == "gaccum_core") and name not in LAZY_IMPORTS_ALLOWED:
            problems.append(f"{where} imports {module} inside a function")
    return problems


def test_the_dashboard_is_a_layer_between_the_pages_and_the_core():
    problems = [p for name, path in _front_files().items() for p in _front_problems(name, path)]
    assert not problems, "\n".join(problems)


def test_no_circle_in_the_dashboard_counting_imports_inside_functions():
    files = _front_files()
    graph = {name: {m for m, _, _, _ in _front_imports(path) if m in files and m != name}
             for name, path in files.items()}
    for name, path in files.items():  # `from dashboard import link` imports the module dashboard.link
        graph[name] |= {f"{m}.{n}" for m, names, _, _ in _front_imports(path) if m in FRONT for n in names
                        if f"{m}.{n}" in files}
    circle = _circle(graph)
    assert not circle, "import circle: " + " -> ".join(circle)


def test_the_dashboard_check_sees_what_it_refuses(tmp_path):
    """The checks are not vacuous: a page asking torch, reading a private name, a lazy import, all flagged."""
    page = tmp_path / "page.py"
    page.write_text("import torch\nfrom gaccum_core.config import _check_types\ndef f():\n"
                    "    from dashboard import live\n")
    found = "\n".join(_front_problems("app_pages.page", page))
    assert "imports torch" in found and "private name" in found and "inside a function" in found
    glue = tmp_path / "glue.py"
    glue.write_text("import pandas\nfrom app_pages import x\n")
    found = _front_problems("dashboard.glue", glue)
    assert len(found) == 1 and "does not import the pages" in found[0]  # pandas: allowed in the glue
    assert _circle({"dashboard.a": {"dashboard.b"}, "dashboard.b": {"dashboard.c"}, "dashboard.c": {"dashboard.a"}}) \
        == ["dashboard.a", "dashboard.b", "dashboard.c", "dashboard.a"]


# The picture of the layers in the README's Architecture section, drawn from the imports as they are:
# `python tests/test_layers.py` prints it; the test below fails when the README's copy is stale.
PICTURE_ROWS = (  # top to bottom: (layers, what they are)
    (("app_pages",), "the pages: layout and wiring"),
    (("dashboard",), "Streamlit glue: widget state, server, checks, messages"),
    (("cli",), "the command line, one module per command"),
    (("views",), "figures and tables, pure"),
    (("sweeps",), "grids of runs, their summaries"),
    (("execution",), "running runs: runner, workers, resume"),
    (("tensorboard", "verify"), "siblings: event files; the check of your own loop"),
    (("runs", "plan", "lab"), "siblings: none imports another"),
    (("train",), "accumulation → step → engine, checkpoint"),
    (("models", "data"), "what is trained, on what"),
    (("",), "shared vocabulary: config, states, ..."),
)


def _layer_of(module: str) -> str:
    top = module.split(".")[0]
    return top if top in FRONT else _package(module)


def _layer_edges() -> dict[str, set[str]]:
    """For each layer, the other layers its modules import (at module level or inside functions)."""
    edges: dict[str, set[str]] = {}
    for module, imports in _graph().items():
        if module not in ENTRY_POINTS:
            edges.setdefault(_package(module), set()).update(_package(t) for t, _, _ in imports)
    for name, path in _front_files().items():
        edges.setdefault(name.split(".")[0], set()).update(
            _layer_of(m) for m, _, _, _ in _front_imports(path) if m.split(".")[0] in (*FRONT, "gaccum_core"))
    return {layer: targets - {layer} for layer, targets in edges.items()}


def layer_picture() -> str:
    """The layers top to bottom, each with its module count and the layers it imports."""
    counts: dict[str, int] = {}
    for module in _graph():
        counts[_package(module)] = counts.get(_package(module), 0) + 1
    for name in _front_files():
        counts[name.split(".")[0]] = counts.get(name.split(".")[0], 0) + 1
    edges, order = _layer_edges(), [layer for layers, _ in PICTURE_ROWS for layer in layers]
    lines = []
    for layers, words in PICTURE_ROWS:
        names = "  ".join(f"{layer or 'vocabulary'} ({counts.get(layer, 0)})" for layer in layers)
        below = sorted({t for layer in layers for t in edges.get(layer, ())}, key=order.index)
        lines.append(f"{names:<34}{words}")
        if below:
            lines.append(f"  ↓ imports {', '.join(t or 'vocabulary' for t in below)}")
    return "\n".join(lines)


def test_the_readme_pictures_the_layers_as_they_are():
    readme = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert f"```\n{layer_picture()}\n```" in readme, "run `python tests/test_layers.py` and paste its picture"


if __name__ == "__main__":
    print(layer_picture())
