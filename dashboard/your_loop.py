"""The Equivalence page's "Your loop": a file of yours from the allowed folder (GACCUM_USER_CODE), checked by verify
in a worker process of its own (the server only reads the file's syntax tree), with progress and a Cancel button;
then the verdict, its charts, the diagnosis with its fix, and the report to download."""

from __future__ import annotations

import os
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

import streamlit as st

from dashboard.checks import device_turn
from dashboard.server import get_runner
from dashboard.state import kept, set_kept, widget
from gaccum_core.config import ConfigError
from gaccum_core.execution.aside import call_aside
from gaccum_core.execution.your_loop import check_file_aside
from gaccum_core.verify.loop import OBJECTIVE
from gaccum_core.train.device import device_choices, resolve_device
from gaccum_core.usercode import USER_CODE_ENV, allowed_folder, check_named
from gaccum_core.verify.loop import VerifyError
from gaccum_core.verify.report import VerifyReport
from gaccum_core.verify.splits import parse_splits
from gaccum_core.views.verify import diagnosis, difference_figure, report_csv, report_json, scale_figure, split_table
from gaccum_core.words import first_line

KEY = "eq_loop_"  # the section's widget and state keys
FILES_SHOWN = 500  # the most files of the folder offered
AS_SET_UP = "as setup() leaves it"  # the device option that moves nothing (verify's default)
ProgressBar = Callable[[str, str], tuple[Any, Callable[[int, int], None]]]  # the page's progress_bar


def loop_files(folder: Path) -> list[str]:
    """The Python files inside folder as paths relative to it, sorted (hidden folders, __pycache__ and files that
    resolve outside it left out), the first FILES_SHOWN."""
    found = []
    for top, folders, files in os.walk(folder):
        folders[:] = sorted(f for f in folders if not f.startswith(".") and f != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(top, name)
            if folder in path.resolve().parents:
                found.append(path.relative_to(folder).as_posix())
        if len(found) >= FILES_SHOWN:
            break
    return found[:FILES_SHOWN]


def splits_refusal(text: str) -> str | None:
    """verify's own refusal of a --splits text before the batch is known (its syntax, and splits that add up to
    different totals: the first split's is taken as the batch's), or None."""
    try:
        total = sum(int(size) for size in text.split("/")[0].split(","))
    except ValueError:
        total = 0  # parse_splits names the first split's syntax
    try:
        parse_splits(text, total)
    except VerifyError as exc:
        return str(exc)
    return None


def _name_refusal(path: Path, role: str, name: str) -> str | None:
    """Whether the file defines the function (its syntax tree read, nothing run), in one line, or None."""
    try:
        check_named(role, f"{path}:{name}")
    except ConfigError as exc:
        return f"{role} function = {name!r} is not allowed: {exc.allowed}"
    return None


def _box(draw: Callable[..., Any], label: str, field: str, default: Any, refuse: Callable[[Any], str | None],
         **kwargs: Any) -> tuple[Any, str | None]:
    """A control kept across reruns, and its value's refusal in one line right under it (None when allowed)."""
    value = widget(draw, label, KEY + field, default, **kwargs)
    refused = refuse(value)
    if refused:
        st.error(refused)
    return value, refused


def _fixed_k_refusal(value: Any) -> str | None:
    if isinstance(value, int) and value >= 0:
        return None
    return f"Fixed K = {value!r} is not allowed: an integer ≥ 1, or 0 for none (k = len(micro_batches))"


def your_loop(progress_bar: ProgressBar) -> None:
    """The section: your file and how to read it, the check in a worker process, and its report."""
    folder = allowed_folder()
    files = loop_files(folder) if folder is not None and folder.is_dir() else []
    st.write("Your own training loop, checked as `python -m gaccum_core verify FILE.py` checks it: one batch from "
             "`setup()` split several ways, `window(model, micro_batches)` run on each from the same start, and the "
             "gradients compared. A correct accumulation loop gives the same gradient for every split.")
    if not files:
        where = f"{USER_CODE_ENV}={folder} holds no Python file" if folder else f"{USER_CODE_ENV} is not set"
        st.info(f"{where}: the dashboard runs no code of yours unless its server is started with {USER_CODE_ENV}=DIR "
                "naming the folder that holds your loop's FILE.py (it runs there, in a worker process; the command "
                "line's `verify` takes any file).")
        return
    left, middle, right = st.columns(3)
    with left:
        file, names, named = _file_and_names(folder, files)
    with middle:
        (splits, fixed_k), read, splits_slot = _how_to_split()
    with right:
        device = widget(st.selectbox, "Device", KEY + "device", AS_SET_UP, options=[AS_SET_UP, *device_choices()],
                        help="moves the model and a dict batch's tensors there (a list batch stays as it is)")
    arguments = (str(folder / file) if file else "", *names, splits.strip() or None, fixed_k or None,
                 None if device == AS_SET_UP else device)
    _run(file, bool(file) and named and read, arguments, progress_bar, splits_slot)
    _results(st.session_state.get(KEY + "report"))


def _file_and_names(folder: Path, files: list[str]) -> tuple[str | None, tuple[str, str, str | None], bool]:
    """The file picked (None until one is), the setup, window and objective names (None: the optional one), and
    whether the file defines them; each refusal under its box."""
    if kept(KEY + "file") not in files:
        set_kept(KEY + "file", None)
    file = widget(st.selectbox, f"Your loop's file (in {folder})", KEY + "file", None, options=files,
                  placeholder="choose your loop's file")

    def defined(role: str) -> Callable[[str], str | None]:
        return lambda name: _name_refusal(folder / file, role, name) if file else None

    (setup, no_setup), (window, no_window) = (_box(st.text_input, f"{role} function", role, role, defined(role))
                                              for role in ("setup", "window"))
    objective, no_objective = _box(st.text_input, "objective function (optional)", "objective", OBJECTIVE,
                                   lambda name: defined("objective")(name) if name.strip() != OBJECTIVE else None)
    wanted = objective.strip() if objective.strip() not in ("", OBJECTIVE) else None
    return file, (setup, window, wanted), not (no_setup or no_window or no_objective)


def _how_to_split() -> tuple[tuple[str, Any], bool, Any]:
    """The splits typed and the fixed K, whether both are allowed (each refusal under its box), and the slot under
    the splits for the worker's refusal of splits that do not add up to the batch's samples."""
    splits, no_splits = _box(st.text_input, "Splits (empty: the default set)", "splits", "",
                             lambda text: splits_refusal(text) if text.strip() else None, placeholder="12/6,6/1,11",
                             help="micro-batch sizes between commas, splits between slashes: 12/6,6/1,11 (default: "
                             "the whole batch, halves, [1, B-1], [B-1, 1], one sample each when B ≤ 16, a seeded "
                             "uneven three-way split)")
    slot = st.empty()
    fixed_k, no_k = _box(st.number_input, "Fixed K (0: none)", "fixed_k", 0, _fixed_k_refusal, step=1,
                         help="for loops configured with K micro-batches per step: passed as window(model, "
                         "micro_batches, fixed_k=K); splits then hold at most K")
    return (splits, fixed_k), not (no_splits or no_k), slot


def _run(file: str | None, ready: bool, arguments: tuple, progress_bar: ProgressBar, splits_slot: Any) -> None:
    """The Check button: check_file in a worker process, a Cancel button and the progress bar while it runs. Cancel
    reruns the page: Streamlit stops this run at its next call (told, within a beat); call_aside kills the worker."""
    if st.session_state.get(KEY + "cancel"):  # clicked while it ran: that rerun ended the worker process
        st.info("Cancelled: the check's worker process is ended.")
    if not st.button("Check my loop", type="primary", key=KEY + "run", disabled=not ready):
        return
    st.session_state.pop(KEY + "report", None)
    cancel = st.empty()
    cancel.button("Cancel", key=KEY + "cancel")
    bar, moved = progress_bar("Checking your loop", "window run")

    def told(*progress: int) -> None:
        """A window run done, or the worker saying it still works: a call at which a page's run that ended stops."""
        if progress:
            moved(*progress)
        else:
            bar.progress(0.0, text="Checking your loop: importing it, calling setup() and its first window…")

    device = arguments[-1]
    try:
        on = resolve_device(device) if device else None
        turn = device_turn(get_runner(), bar, "Checking your loop…")((f"cuda:{on.index or 0}",)) \
            if on is not None and on.type == "cuda" else nullcontext()
        with turn:  # your file is imported there, never in the server
            st.session_state[KEY + "report"] = (file, call_aside(check_file_aside, *arguments, progress=told))
    except VerifyError as exc:
        message = " ".join(str(exc).split())
        (splits_slot if message.startswith("splits=") else st).error(message)
    except (ConfigError, RuntimeError) as exc:
        st.error(first_line(exc))
    bar.empty()
    cancel.empty()


def _results(checked: tuple[str, VerifyReport] | None) -> None:
    """The verdict, the charts, the diagnosis and its fix under them, the splits' table and the downloads."""
    if checked is None:
        return
    file, report = checked
    (st.success if report.passed else st.warning)(f"{file}: {report.verdict}")
    figures = {"eq_loop_differences": difference_figure(report), "eq_loop_scales": scale_figure(report)}
    shown = {key: figure for key, figure in figures.items() if figure is not None}
    for column, (key, figure) in zip(st.columns(len(shown)), shown.items()):
        column.plotly_chart(figure, key=key, theme=None)
    words = diagnosis(report)
    if words:
        st.write(words)
    st.write(f"Fix: {report.fix}")
    with st.expander("Per split: micro-batch sizes, k, relative difference, scale"):
        st.dataframe(split_table(report), hide_index=True, width="stretch")
    csv, json = st.columns(2)
    csv.download_button("Download the report (CSV)", report_csv(report), file_name="gaccum-verify.csv",
                        mime="text/csv", key=KEY + "download_csv")
    json.download_button("Download the report (JSON)", report_json(report), file_name="gaccum-verify.json",
                         mime="application/json", key=KEY + "download_json")
