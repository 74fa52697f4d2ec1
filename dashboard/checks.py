"""The checks every page runs on its settings before a button may start anything: the core's preflight and
the data set's description, each remembered per settings and per version of the files they read, and the
refusal in the page's words under the control that holds the value."""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import streamlit as st

from dashboard.messages import explain, in_page_words
from gaccum_core.config import ConfigError, RunConfig, is_factory, is_hf
from gaccum_core.data.load import describe_dataset
from gaccum_core.data.sources import DataError
from gaccum_core.data.text import CORPUS_DATASETS, cache_root, cache_status, tokenise_corpus
from gaccum_core.data.tokenising import BuildProgress
from gaccum_core.hfdir import directory_version, hf_directory
from gaccum_core.execution.aside import Turn, call_aside
from gaccum_core.train.checks import preflight
from gaccum_core.usercode import file_version

if TYPE_CHECKING:
    from gaccum_core.execution.runner import Runner


def file_stamp(path: str) -> tuple[int, int] | None:
    """(modification time, size) of a file, so a cached check follows its edits; None if unreadable."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    return info.st_mtime_ns, info.st_size


def folder_stamp(path: str) -> tuple:
    """The versions of a folder's files (name, modification time, size), so a cached check follows a file
    written, replaced or removed there; empty if it cannot be listed."""
    try:
        names = sorted(os.listdir(path))
    except (OSError, ValueError):
        return ()
    return tuple((name, file_stamp(os.path.join(path, name))) for name in names[:1000])


def file_stamps(config: RunConfig) -> tuple:
    """The versions of the files that settings read, for a cache key: the text file (or the folder of a text,
    tokens or hf-dataset corpus), an hf: model's directory, your model's and data set's FILE.py, the weights file
    (ConfigError naming model for an hf: directory that is not one)."""
    if config.dataset == "text":
        path = config.text_file
        text = (folder_stamp(path) if os.path.isdir(path) else file_stamp(path) if not glob.has_magic(path)
                else tuple((name, file_stamp(name)) for name in sorted(glob.glob(path))[:1000]))
    else:
        text = folder_stamp(config.data_dir) if config.dataset in ("tokens", "hf-dataset") else None
    tokenizer = directory_version(hf_directory(config.model)) if is_hf(config.model) else None
    mine = tuple(file_version(getattr(config, f)) for f in ("model", "dataset") if is_factory(getattr(config, f)))
    # The token cache's folder changes when a run tokenises a corpus into it (and its description with it): its
    # stamp, not the corpus's cache status, which would load an hf: tokenizer on every rerun of the page.
    cache = file_stamp(str(cache_root(config))) if config.dataset in CORPUS_DATASETS else None
    weights = file_stamp(config.weights_file) if config.weights_file else None
    return text, tokenizer, mine, cache, weights


@st.cache_data(show_spinner="Checking the settings…", max_entries=64)
def _preflight(config_json: str, stamps: tuple, whole_window: bool) -> None:
    """preflight, remembered for settings that pass; a failure is not cached, so data placed in the data
    directory after the error shows is seen on the next rerun. A text file, an hf: model's directory or your
    data set's file is checked again whenever it changes (its stamp is in the key)."""
    preflight(RunConfig.from_json(config_json), whole_window=whole_window)


def refusal(config: RunConfig, labels: Mapping[str, str], whole_window: bool = False) -> tuple[str, str] | None:
    """(field, message in the page's words) for settings that cannot run here (model, data, device, batch;
    whole_window: b·k must fit the data), or None."""
    try:
        _preflight(config.to_json(), file_stamps(config), whole_window)
    except ConfigError as exc:  # a text file that cannot be used names text_file
        return exc.field, explain(exc, labels)
    except DataError as exc:  # data set missing or unreadable: shown under the data directory
        return ("text_file" if config.is_text else "data_dir"), in_page_words(str(exc), labels)
    except ValueError as exc:  # the model cannot take the images
        return "image_size", in_page_words(str(exc), labels)
    return None


@st.cache_data(show_spinner=False, max_entries=32)
def _description(config_json: str, stamps: tuple) -> str:
    """describe_dataset, remembered per settings and file versions: a text set is read and cut to describe it."""
    return describe_dataset(RunConfig.from_json(config_json))


def description(config: RunConfig) -> str:
    """A line on the data set of these settings (its size, classes or tokens)."""
    return _description(config.to_json(), file_stamps(config))


def tokenise_aside(config: RunConfig) -> None:
    """Before a page computes on a corpus not yet in its token cache (Plan, Equivalence): tokenise it in a worker
    process of its own, never in the server's, with a progress bar (MB done, speed, time left)."""
    if config.dataset not in CORPUS_DATASETS or cache_status(config).cached:
        return
    bar = st.progress(0.0, text=f"tokenising {config.text_file or config.data_dir} once into the token cache…")

    def moved(progress: BuildProgress) -> None:
        done = progress.bytes_done / progress.bytes_total if progress.bytes_total else 0.0
        bar.progress(min(done, 1.0), text=progress.words())

    call_aside(tokenise_corpus, config, progress=moved)
    bar.empty()


def device_turn(runner: Runner, bar: Any, going: str) -> Turn:
    """call_for's turn for a page's computation on a GPU: it waits for the runs on its GPU to end (Runner.turn), the
    bar saying meanwhile whom for ('waiting for run baseline on cuda:0 to end before measuring…'), then `going`."""

    @contextmanager
    def turn(devices: tuple[str, ...]) -> Iterator[None]:
        waiting = lambda who: bar.progress(0.0, text=f"waiting for {who} to end before measuring…")  # noqa: E731
        with runner.turn(devices, waiting=waiting):
            bar.progress(0.0, text=going)
            yield

    return turn
