"""The docs site: `mkdocs build --strict` passes (a broken link or anchor in the README or a page fails it), the
settings page is generated with a row per RunConfig field, and the README stays a five-minute read that links
every page."""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gaccum_core.config import RunConfig

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of the project folder into site; the finished process."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's banner about MkDocs 2.0
    return subprocess.run([str(MKDOCS), "build", "--strict", "-d", str(site)], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def _copy(where: Path) -> Path:
    """A copy of what the site is built from (README.md, mkdocs.yml, docs/); its folder."""
    where.mkdir()
    shutil.copytree(ROOT / "docs", where / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("README.md", "mkdocs.yml"):
        shutil.copy(ROOT / name, where / name)
    return where


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from the checkout, in a temporary folder."""
    site = tmp_path_factory.mktemp("docs") / "site"
    built = _build(ROOT, site)
    assert built.returncode == 0, built.stdout + built.stderr
    return site


def test_the_site_builds_with_the_readme_as_its_home_page(site):
    home = (site / "index.html").read_text()
    assert "The accumulation contract" in home and 'href="dashboard/"' in home
    assert not list(ROOT.glob("docs/settings.md")), "the settings page is generated at build time, never committed"


def test_the_settings_page_has_a_row_per_run_config_field(site):
    page = (site / "settings" / "index.html").read_text()
    rows = re.findall(r"<tr>\s*<td><code>(\w+)</code></td>\s*<td><code>(--[\w-]+)</code>", page)
    fields = [f.name for f in dataclasses.fields(RunConfig)]
    assert [name for name, _ in rows] == fields
    assert ("micro_batch_size", "--micro-batch-size") in rows and ("amp", "--amp") in rows
    amp = page[page.index("<code>--amp</code>"):].split("</tr>")[0]
    assert all(f"<code>{mode}</code>" in amp for mode in ("off", "fp16", "bf16"))


BREAKS = {"README.md": ("](docs/memory.md)", "](docs/no-such-page.md)"),  # a page that is not there
          "docs/dashboard.md": ("](memory.md#the-memory-planner)", "](memory.md#no-such-anchor)")}  # nor an anchor


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    project = _copy(tmp_path / "project")
    for page, (old, new) in BREAKS.items():
        text = (project / page).read_text()
        assert old in text
        (project / page).write_text(text.replace(old, new, 1))
    built = _build(project, tmp_path / "site")
    warnings = [line for line in (built.stdout + built.stderr).splitlines() if line.startswith("WARNING")]
    assert built.returncode != 0, built.stderr
    # Each break is a warning of its own (--strict fails on any), not an INFO line beside the other's warning.
    assert [any(name in line for line in warnings) for name in ("no-such-page.md", "no-such-anchor")] == [True, True]


def test_the_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme))
    assert linked == {page.name for page in (ROOT / "docs").glob("*.md")}
    for heading in ("## Set up", "## The accumulation contract", "## A five-minute tour", "## The reference"):
        assert f"\n{heading}\n" in readme, heading
