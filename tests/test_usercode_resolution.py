"""A dotted MODULE:FUNCTION under GACCUM_USER_CODE is resolved level by level before anything runs (issue 40, 2).

Every level's file (a package's __init__.py too, and the package Python prefers over a same-named .py) must
resolve inside the folder and be Python source that Python would import as that name: a link out of the folder,
a built-in, frozen, namespace or compiled module is refused by the dashboard's static check and by the worker's
import alike, and the file outside never runs (it would leave a marker).
"""

import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, FrozenImporter
from pathlib import Path

import pytest

from gaccum_core import usercode
from gaccum_core.config import ConfigError

BUILD = "def build(input_shape, num_classes):\n    return None\n"
# Written where it runs: beside the folder, so a marker means code from outside the folder was executed.
EVIL = "from pathlib import Path\nPath(__file__).with_name('ran.marker').write_text('ran')\n" + BUILD


def _check(value: str) -> object:
    return usercode.check_named("model", value)


def _import(value: str) -> object:
    return usercode.user_function("model", value)


BOTH = pytest.mark.parametrize("resolve", [_check, _import], ids=["static-check", "worker-import"])


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """GACCUM_USER_CODE=tmp_path/code, with evil.py outside it; sys.path and the modules imported put back after."""
    code = tmp_path / "code"
    code.mkdir()
    (tmp_path / "evil.py").write_text(EVIL, encoding="utf-8")
    monkeypatch.setenv(usercode.USER_CODE_ENV, str(code))
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield code
    for name in set(sys.modules) - before:
        del sys.modules[name]


def _refused(resolve, value: str) -> str:
    with pytest.raises(ConfigError) as refused:
        resolve(value)
    message = str(refused.value)
    assert refused.value.field == "model" and "\n" not in message, message
    return message


@BOTH
def test_a_package_init_linked_out_of_the_folder_is_refused_unrun(folder, resolve):
    (folder / "linked_pkg").mkdir()
    (folder / "linked_pkg" / "__init__.py").symlink_to(folder.parent / "evil.py")
    (folder / "linked_pkg" / "mod.py").write_text(BUILD, encoding="utf-8")
    message = _refused(resolve, "linked_pkg.mod:build")
    assert "linked_pkg resolves outside it" in message, message
    assert not (folder.parent / "ran.marker").exists()


@BOTH
def test_the_package_python_prefers_over_a_same_named_file_is_the_one_checked(folder, resolve):
    (folder / "twin.py").write_text(BUILD, encoding="utf-8")
    (folder / "twin").mkdir()
    (folder / "twin" / "__init__.py").symlink_to(folder.parent / "evil.py")
    message = _refused(resolve, "twin:build")
    assert "twin resolves outside it" in message and str(folder.parent / "evil.py") in message, message
    assert not (folder.parent / "ran.marker").exists()


@BOTH
def test_a_package_folder_linked_out_is_refused_unrun(folder, resolve):
    outside = folder.parent / "elsewhere"
    outside.mkdir()
    (outside / "__init__.py").write_text(EVIL.replace("with_name('ran.marker')", "parent.with_name('ran.marker')"),
                                         encoding="utf-8")
    (outside / "mod.py").write_text(BUILD, encoding="utf-8")
    (folder / "far").symlink_to(outside, target_is_directory=True)
    message = _refused(resolve, "far.mod:build")
    assert "far resolves outside it" in message, message
    assert not (folder.parent / "ran.marker").exists()


@BOTH
def test_a_package_inside_the_folder_still_resolves_to_its_module(folder, resolve):
    (folder / "mine").mkdir()
    (folder / "mine" / "__init__.py").write_text("", encoding="utf-8")
    (folder / "mine" / "mod.py").write_text(f"import os\nMARK = os.getpid()\n{BUILD}", encoding="utf-8")
    found = resolve("mine.mod:build")
    if resolve is _check:
        assert found == folder / "mine" / "mod.py"
    else:
        assert callable(found) and sys.modules["mine.mod"].MARK == os.getpid()


@BOTH
def test_a_built_in_module_is_refused_even_with_a_same_named_file_in_the_folder(folder, resolve, monkeypatch):
    (folder / "sys.py").write_text("def exit():\n    return None\n", encoding="utf-8")
    monkeypatch.chdir(folder)  # the folder is also the current one: a built-in has no file to resolve there
    message = _refused(resolve, "sys:exit")
    assert "sys is built into Python" in message and "rename yours" in message, message


@BOTH
def test_a_frozen_module_is_refused(folder, resolve):
    assert FrozenImporter.find_spec("__hello__") is not None, "CPython freezes __hello__ (its own test module)"
    (folder / "__hello__.py").write_text(BUILD, encoding="utf-8")
    message = _refused(resolve, "__hello__:build")
    assert "__hello__ is frozen into Python" in message, message


@BOTH
def test_a_module_already_imported_from_elsewhere_is_refused(folder, resolve):
    (folder / "json.py").write_text(BUILD, encoding="utf-8")
    message = _refused(resolve, "json:build")
    import json

    assert f"json is imported already from {json.__file__}" in message, message


@BOTH
def test_a_namespace_package_is_refused(folder, resolve):
    (folder / "loose").mkdir()
    (folder / "loose" / "mod.py").write_text(BUILD, encoding="utf-8")
    message = _refused(resolve, "loose.mod:build")
    assert "loose is a namespace package (a folder without __init__.py)" in message, message


@BOTH
@pytest.mark.parametrize("suffix", [EXTENSION_SUFFIXES[0], ".so"])
def test_an_extension_module_is_refused_though_a_same_named_py_is_beside_it(folder, resolve, suffix):
    (folder / "compiled.py").write_text(BUILD, encoding="utf-8")
    (folder / f"compiled{suffix}").write_bytes(b"")  # Python prefers it to compiled.py
    message = _refused(resolve, "compiled:build")
    assert f"compiled is a compiled extension module (compiled{suffix})" in message, message


def test_the_worker_refuses_a_name_an_earlier_path_entry_would_give_python_unrun(folder, monkeypatch):
    """The folder is on sys.path already, after another entry holding the same name: Python's own lookup
    (sys.meta_path, then sys.path in order) is asked before the import, which would run the other file."""
    earlier = folder.parent / "earlier"
    earlier.mkdir()
    (earlier / "shadow.py").write_text(EVIL.replace("with_name('ran.marker')", "parent.with_name('ran.marker')"),
                                       encoding="utf-8")
    (folder / "shadow.py").write_text(BUILD, encoding="utf-8")
    monkeypatch.setattr(sys, "path", [str(earlier), str(folder), *sys.path])
    message = _refused(_import, "shadow:build")
    assert f"shadow is {earlier / 'shadow.py'} to Python's import, not {folder / 'shadow.py'}" in message, message
    assert not (folder.parent / "ran.marker").exists()
