"""Package-wide rules: the engine never imports streamlit; CI runs the README's test command."""

import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import gaccum_core

ROOT = Path(__file__).resolve().parents[1]


def test_gaccum_core_never_imports_streamlit():
    modules = [m.name for m in pkgutil.walk_packages(gaccum_core.__path__, "gaccum_core.")
               if not m.name.endswith("__main__")]
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "assert 'streamlit' not in sys.modules, 'streamlit was imported'\nprint(len(sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(modules) >= 40


def test_readme_starts_with_two_commands_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    start, test = blocks[0].strip(), blocks[1].strip()
    assert "streamlit run app.py" in start and "pip install -r requirements.txt" in start
    assert "pytest" in test and "requirements-dev.txt" in test
    assert test in (ROOT / ".ci" / "run").read_text()


def test_requirements_pin_torch_and_torchvision():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.14.1" in lines and "torchvision==0.29.1" in lines


def test_no_two_test_files_share_a_name():
    """tests/ has no __init__.py: pytest imports each test file by its name alone, so two files of one name in
    different folders fail to collect under xdist ("import file mismatch") on a clean clone."""
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)}")
        seen[path.name] = path
    assert len(seen) > 50 and not clashes, clashes
