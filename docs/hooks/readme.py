"""mkdocs hook: the README is the site's home page (index.md), its links into docs/ made relative to the site."""

from __future__ import annotations

from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

README = Path(__file__).resolve().parents[2] / "README.md"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add README.md as index.md, with `](docs/page.md)` links read as `](page.md)`."""
    files.append(File.generated(config, "index.md", content=README.read_text().replace("](docs/", "](")))
    return files
