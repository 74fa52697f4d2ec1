"""The installable package: pyproject's [project] table declares what the code imports, as ranges the pins in
requirements.txt satisfy (so `pip install -e .` in the README's venv installs nothing new), and an install gives
the `gaccum` command and `python -m gaccum_core` from any folder."""

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
_DISTRIBUTIONS = functools.cache(packages_distributions)  # reads every installed dist's files


def _pins() -> dict[str, str]:
    """requirements.txt's exact pins: {canonical name: version}."""
    lines = (line.split("#")[0].strip() for line in (ROOT / "requirements.txt").read_text().splitlines())
    pins = [Requirement(line) for line in lines if line]
    return {canonicalize_name(pin.name): str(pin.specifier).removeprefix("==") for pin in pins}


def _declared(*extras: str) -> list[Requirement]:
    """[project] dependencies, with those of the named optional-dependencies groups."""
    table = PROJECT["project"]
    texts = table["dependencies"] + [text for extra in extras for text in table["optional-dependencies"][extra]]
    return [Requirement(text) for text in texts]


@functools.cache
def _modules(path: Path) -> frozenset[str]:
    """The top-level modules that the Python file at path, or the files under it, import (not relatively)."""
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    modules = set()
    for node in (node for f in files for node in ast.walk(ast.parse(f.read_text()))):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules.add(node.module.split(".")[0])
    return frozenset(modules)


def _imported(paths: list[Path]) -> set[str]:
    """The installed distributions (canonical names) whose modules the code under paths imports."""
    third_party = set().union(*map(_modules, paths)) - set(sys.stdlib_module_names) - {"gaccum_core", "dashboard"}
    dists = _DISTRIBUTIONS()
    return {canonicalize_name(dist) for module in third_party for dist in dists.get(module, [module])}


def test_each_declared_range_holds_its_pin():
    pins = _pins()
    declared = _declared(*PROJECT["project"]["optional-dependencies"])
    unpinned = [str(req) for req in declared if canonicalize_name(req.name) not in pins]
    outside = [f"{req} (pinned {pins[canonicalize_name(req.name)]})" for req in declared
               if canonicalize_name(req.name) in pins and pins[canonicalize_name(req.name)] not in req.specifier]
    assert len(declared) >= 10 and not unpinned and not outside, (unpinned, outside)


@pytest.mark.parametrize("paths, extras", [(["gaccum_core"], ()),
                                           (["gaccum_core", "dashboard", "app_pages", "app.py"], ("dashboard",))])
def test_what_the_code_imports_is_declared(paths, extras):
    declared = {canonicalize_name(req.name) for req in _declared(*extras)}
    imported = _imported([ROOT / path for path in paths])
    assert {"torch", "pyyaml"} <= imported and imported <= declared, sorted(imported - declared)


def test_both_set_up_commands_install_the_package():
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), flags=re.S)
    assert all(" -r requirements.txt " in block and " -e . && " in block for block in blocks[:2]), blocks[:2]


def _throwaway_venv(where: Path) -> Path:
    """A venv without pip that sees the project venv's packages (through a .pth line, not its .pth files); its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=60)
    site = Path(sysconfig.get_paths(vars={"base": str(where), "platbase": str(where)})["purelib"])
    (site / "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin" / "python"


@pytest.mark.multiprocess
def test_install_gives_the_gaccum_command_and_python_m_from_any_folder(tmp_path):
    # A copy of what the build reads, so the build's gaccum.egg-info is written there, not into the checkout.
    source = tmp_path / "source"
    shutil.copytree(ROOT / "gaccum_core", source / "gaccum_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    python = _throwaway_venv(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The venv's own setuptools (torch requires one), nothing fetched: the index is not what is tested here.
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed",
                              "--no-build-isolation", "-e", str(source)], capture_output=True, text=True, env=env,
                             timeout=300)
    assert install.returncode == 0 and (python.parent / "gaccum").is_file(), install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Each command with a flag only its help lists; both at once, each importing torch.
    commands = {"--accum-steps": [str(python.parent / "gaccum"), "run", "--help"],
                "--effective-batch": [str(python), "-m", "gaccum_core", "plan", "--help"]}
    started = {flag: subprocess.Popen(command, cwd=elsewhere, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True) for flag, command in commands.items()}
    for flag, process in started.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0 and flag in out, (commands[flag], err)
        called = "gaccum run" if commands[flag][0].endswith("gaccum") else "python -m gaccum_core plan"
        assert out.startswith(f"usage: {called} "), out.splitlines()[0]  # each says how it was called
