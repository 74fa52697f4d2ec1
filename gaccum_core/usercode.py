"""Your own code named in a setting: `MODULE:FUNCTION` (a module on the Python path) or `FILE.py:FUNCTION`.

Shared by your model factories (the model field) and your data set functions (the dataset field).

Where it may run:
- The command line imports it as it is named (the person who runs the command owns the machine).
- The dashboard's server never imports it. Its pages register `confine` (their threads are the server's),
  and a name is then only read: `check_named` finds the file in the folder that GACCUM_USER_CODE names
  and reads its syntax tree for the function. With GACCUM_USER_CODE unset, the dashboard takes no code
  of yours at all. A run started from the dashboard imports it in its worker process, on Start; the Plan
  and Equivalence pages compute on it in a worker process of their own (execution/aside.py).
- With GACCUM_USER_CODE set, every process (the server's workers, and a command line started with it)
  looks names up in that folder only: FILE.py inside it (a relative path is taken from there), MODULE a
  module found there, resolved level by level before anything runs (every file, a package's __init__.py
  too, Python source inside the folder that Python would import as that name).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import os
import sys
from importlib.machinery import ExtensionFileLoader, FrozenImporter, ModuleSpec, PathFinder, SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Callable

from gaccum_core.config import ConfigError, RunConfig, is_factory
from gaccum_core.words import first_line

USER_CODE_ENV = "GACCUM_USER_CODE"  # the folder whose files the dashboard may use as your own code
_FORM = "MODULE:FUNCTION or FILE.py:FUNCTION"
_confined: list[Callable[[], bool]] = []


def confine(where: Callable[[], bool]) -> None:
    """Never import your code in a thread for which where() holds (the dashboard: its pages' threads)."""
    if where not in _confined:
        _confined.append(where)


def runs_here() -> bool:
    """Whether this thread may import your code (False in the dashboard's server)."""
    return not any(where() for where in _confined)


def allowed_folder() -> Path | None:
    """The folder GACCUM_USER_CODE names (resolved), or None when it is unset or empty."""
    value = os.environ.get(USER_CODE_ENV, "").strip()
    return Path(value).expanduser().resolve() if value else None


def user_code_fields(config: RunConfig) -> list[tuple[str, str]]:
    """(field, value) of each setting of this config that names your own code: model and/or dataset."""
    return [(field, getattr(config, field)) for field in ("model", "dataset") if is_factory(getattr(config, field))]


def _folder_or_refuse(field: str, value: str) -> Path:
    folder = allowed_folder()
    if folder is None:
        raise ConfigError(field, value, f"a built-in name here: the dashboard runs no code of yours unless its server "
                          f"is started with {USER_CODE_ENV}=DIR naming the folder that holds it (the command "
                          f"line takes {_FORM} as it is)")
    if not folder.is_dir():
        raise ConfigError(field, value, f"code in {USER_CODE_ENV}={folder}, which is not a folder")
    return folder


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _file_in(field: str, value: str, where: str, folder: Path) -> Path:
    """The file inside folder that `where` (FILE.py, relative to folder or absolute, or MODULE) names."""
    if where.endswith(".py"):
        path = (folder / Path(where).expanduser()).resolve()  # an absolute path stays itself
        if not _inside(path, folder):
            raise ConfigError(field, value, f"a file inside {USER_CODE_ENV}={folder}: {path} is outside it")
        if not path.is_file():
            raise ConfigError(field, value, f"{_FORM}: there is no file {path}")
        return path
    return _module_in(field, value, where, folder)


def _module_in(field: str, value: str, where: str, folder: Path) -> Path:
    """The source file of module `where`, found level by level in folder as Python finds it, nothing executed
    (find_spec on a dotted name would import its parents): each level's file, a package's __init__.py too,
    Python source inside folder that Python would not take from elsewhere."""
    parts, search, path = where.split("."), [str(folder)], folder
    for depth, part in enumerate(parts, 1):
        spec = PathFinder.find_spec(part, search)
        if spec is None:
            base = "/".join(parts[:depth])
            raise _refuse_module(field, value, folder, f"there is no {base}.py or {base}/__init__.py there")
        path = _source_in(field, value, ".".join(parts[:depth]), spec, folder)
        search = list(spec.submodule_search_locations or [])
    return path


def _refuse_module(field: str, value: str, folder: Path, why: str) -> ConfigError:
    return ConfigError(field, value, f"a module found in {USER_CODE_ENV}={folder}: {why}")


def _source_in(field: str, value: str, name: str, spec: ModuleSpec, folder: Path) -> Path:
    """The resolved file of one level of a module name; ConfigError unless Python source inside folder."""
    if spec.origin is None:
        raise _refuse_module(field, value, folder, f"{name} is a namespace package (a folder without "
                             "__init__.py), whose parts Python may find anywhere: give it an __init__.py")
    if not isinstance(spec.loader, SourceFileLoader):
        kind = "a compiled extension module" if isinstance(spec.loader, ExtensionFileLoader) else "not Python source"
        raise _refuse_module(field, value, folder, f"{name} is {kind} ({Path(spec.origin).name}); gaccum runs "
                             "Python source files only")
    path = Path(spec.origin).resolve()
    if not _inside(path, folder):
        raise _refuse_module(field, value, folder, f"{name} resolves outside it ({spec.origin} is {path})")
    elsewhere = _taken_elsewhere(name, path)
    if elsewhere:
        raise _refuse_module(field, value, folder, f"{name} is {elsewhere}: Python imports that, not "
                             f"{spec.origin}; rename yours")
    return path


def _taken_elsewhere(name: str, path: Path) -> str | None:
    """What Python imports as `name` instead of the file at path (built in, frozen, imported already), or None."""
    if name in sys.builtin_module_names:
        return "built into Python"
    if FrozenImporter.find_spec(name) is not None:
        return "frozen into Python"
    loaded = sys.modules.get(name)
    file = getattr(loaded, "__file__", None)
    if loaded is not None and (not file or Path(file).resolve() != path):
        return f"imported already from {file or 'Python itself'}"
    return None


def _defines(path: Path, function: str) -> bool:
    """Whether the module's top level defines (def), assigns or imports the name (its syntax tree, not run)."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == function:
            return True
        targets = (node.targets if isinstance(node, ast.Assign) else [node.target]
                   if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        if any(isinstance(t, ast.Name) and t.id == function for t in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == function for alias in node.names):
                return True
    return False


def check_named(field: str, value: str) -> Path:
    """The file that holds the FUNCTION of setting field=value, checked without importing anything: inside
    the GACCUM_USER_CODE folder, readable Python that defines FUNCTION; ConfigError naming the field otherwise."""
    folder = _folder_or_refuse(field, value)
    where, _, function = value.rpartition(":")
    path = _file_in(field, value, where, folder)
    try:
        found = _defines(path, function)
    except (OSError, SyntaxError, ValueError) as exc:
        raise ConfigError(field, value, f"a Python file gaccum can read: {first_line(exc)}") from None
    if not found:
        raise ConfigError(field, value, f"a function {function} in {where}: {path.name} defines none")
    return path


def file_version(value: str) -> tuple[int, int] | None:
    """(modification time, size) of the FILE.py a name points to (looked up in GACCUM_USER_CODE's folder when
    set), for cache keys that follow its edits; None for a module or a file that is not there."""
    where = value.rpartition(":")[0]
    if not where.endswith(".py"):
        return None
    folder = allowed_folder()
    try:
        info = ((folder / Path(where).expanduser()) if folder is not None else Path(where).expanduser()).stat()
    except (OSError, ValueError):
        return None
    return info.st_mtime_ns, info.st_size


def check_config(config: RunConfig) -> None:
    """check_named for each setting of config that names your own code (none: nothing to check)."""
    for field, value in user_code_fields(config):
        check_named(field, value)


def _import_file(field: str, value: str, path: Path) -> ModuleType:
    # Keyed by the file's version too: a long-lived process sees an edited file on the next run.
    name = f"gaccum_usercode_{abs(hash((str(path), path.stat().st_mtime_ns)))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except (Exception, SystemExit) as exc:  # sys.exit() in your file is an error too, not the command's exit
        raise ConfigError(field, value, f"a file that imports: {first_line(exc)}") from None
    sys.modules[name] = module
    return module


def _import_module(field: str, value: str, where: str, folder: Path | None) -> ModuleType:
    if folder is not None:
        _first_on_path(field, value, where.partition(".")[0], folder)
    try:
        return importlib.import_module(where)
    except (Exception, SystemExit) as exc:  # ModuleNotFoundError, or the module's own error while importing
        raise ConfigError(field, value, f"an importable module: {first_line(exc)}") from None


def _first_on_path(field: str, value: str, top: str, folder: Path) -> None:
    """The folder on sys.path, and Python's own lookup of the top-level name (every finder on sys.meta_path and
    sys.path, nothing executed) finding the folder's file; ConfigError otherwise."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))  # the folder's modules first
    mine = _module_in(field, value, top, folder)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None or Path(spec.origin).resolve() != mine:
        raise _refuse_module(field, value, folder, f"{top} is {getattr(spec, 'origin', None) or 'not found'} "
                             f"to Python's import, not {mine}; rename yours")


def _import(field: str, value: str, where: str) -> ModuleType:
    if not runs_here():  # the dashboard's server: names are only read there (check_named), never imported
        raise ConfigError(field, value, "code the dashboard's server never runs: your own code runs only in a "
                          "run's worker process, started from the Train or Sweeps page")
    folder = allowed_folder()
    if folder is not None:
        path = _file_in(field, value, where, folder)
        return _import_file(field, value, path) if where.endswith(".py") else \
            _import_module(field, value, where, folder)
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(field, value, f"{_FORM}: there is no file {path}")
        return _import_file(field, value, path)
    return _import_module(field, value, where, None)


def user_function(field: str, value: str) -> Callable:
    """The FUNCTION that the setting field=value ('MODULE:FUNCTION' or 'FILE.py:FUNCTION') names;
    ConfigError naming the field when it cannot be imported or is not there."""
    where, _, function = value.rpartition(":")
    found = getattr(_import(field, value, where), function, None)
    if not callable(found):
        raise ConfigError(field, value, f"a function {function} in {where}: there is none")
    return found


def call_user_function(field: str, value: str, purpose: str, **arguments: object) -> object:
    """user_function(field, value)(**arguments); what it raises becomes a ConfigError saying what it was for."""
    build = user_function(field, value)
    try:
        return build(**arguments)
    except (Exception, SystemExit) as exc:  # sys:exit as the function must not end the command with status 0
        raise ConfigError(field, value, f"{purpose}: it raised {first_line(exc)}") from None
