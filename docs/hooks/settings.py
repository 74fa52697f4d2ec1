"""mkdocs hook: the settings page (settings.md), a row per RunConfig field, generated at build time from the
fields' metadata (their help) and the CLI's flags."""

from __future__ import annotations

import argparse

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

from gaccum_core.cli.args import add_config_flags
from gaccum_core.config import by_field

INTRO = ("# Settings\n\nEvery setting of a run: a field of `RunConfig` (`gaccum_core/config.py`), a control on the Train "
         "page and a flag of `python -m gaccum_core run`. This table is generated from the command line's flags when "
         "the docs are built.\n\n| setting | flag | default | choices | what it is |\n|---|---|---|---|---|\n")


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def settings_page() -> str:
    """The settings table in Markdown: setting, flag, default, choices and help of each RunConfig field."""
    parser = argparse.ArgumentParser()
    add_config_flags(parser)
    rows, helps = [], by_field("help")
    for action in parser._actions:
        if action.dest not in helps:
            continue  # --help
        choices = ", ".join(f"`{c}`" for c in action.choices) if action.choices else ""
        cells = (f"`{action.dest}`", f"`{action.option_strings[0]}`", f"`{action.default}`", choices,
                 _cell(helps[action.dest]))
        rows.append("| " + " | ".join(cells) + " |\n")
    return INTRO + "".join(rows)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated settings.md to the site's files."""
    files.append(File.generated(config, "settings.md", content=settings_page()))
    return files
