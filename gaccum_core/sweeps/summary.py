"""A sweep's summary, one row per cell: its runs (those that ended without a result named, with their state and
message), each figure's mean ± 95 % interval over the done repeats, and whether the cells that differ only in
b and k coincide. Built from the runs' own files."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from gaccum_core.runs.store import RunStore
from gaccum_core.states import RunState, state_line
from gaccum_core.sweeps.coincidence import Verdict, verdicts
from gaccum_core.sweeps.figures import run_figures
from gaccum_core.sweeps.labels import cell_label
from gaccum_core.sweeps.members import UNFINISHED_STATES, Member, find_members
from gaccum_core.sweeps.spec import SweepSpec, cells, sweep_runs
from gaccum_core.sweeps.stats import mean_ci

WITH_CI = ("final_loss", "test_accuracy", "samples_per_s", "tokens_per_s", "time_s")  # mean and ci columns
MEAN_ONLY = ("peak_mem_mb", "device_peak_mb", "skipped")  # the same in every repeat, or nearly: the mean


@dataclass(frozen=True)
class RunResult:
    """A done run of the sweep with its tables."""

    cell: int
    repeat: int
    run_id: str
    metrics: pd.DataFrame
    evals: pd.DataFrame


@dataclass(frozen=True)
class Summary:
    """The per-cell table, the coincidence verdicts, the loss curves of every done run."""

    spec: SweepSpec
    table: pd.DataFrame
    verdicts: tuple[Verdict, ...]
    curves: pd.DataFrame  # cell, label, repeat, run_id, step, samples_seen, tokens_seen, loss
    members: dict[tuple[int, int], Member]

    @property
    def complete(self) -> bool:
        """Whether every run of the sweep is done."""
        return int(self.table["runs"].sum()) == self.spec.cell_count * self.spec.repeats

    @property
    def any_runs(self) -> bool:
        """Whether any run of the sweep is done: its figures have something to draw."""
        return int(self.table["runs"].sum()) > 0

    def unfinished(self) -> list[dict[str, object]]:
        """Each run of the sweep that ended without a result (failed, or stopped), by cell and repeat: cell,
        label, repeat, run_id, state and message (the next start of the sweep trains it again)."""
        labels = dict(zip(self.table["cell"], self.table["label"]))
        return [{"cell": cell, "label": labels[cell], "repeat": repeat, "run_id": member.run_id,
                 "state": str(member.state), "message": member.message}
                for (cell, repeat), member in sorted(self.members.items()) if member.state in UNFINISHED_STATES]

    def incomplete_words(self) -> list[str]:
        """A line per cell with a run that ended without a result: 'b=8 k=4 is incomplete, its figures from 1 of 2
        runs: <run id> failed: the worker process died (signal SIGKILL (9)) without writing a final state'."""
        rows = self.table.set_index("cell")
        return [f"{rows.at[cell, 'label']} is incomplete, its figures from {rows.at[cell, 'runs']} of "
                f"{rows.at[cell, 'repeats']} runs: {rows.at[cell, 'unfinished_runs']}"
                for cell in dict.fromkeys(run["cell"] for run in self.unfinished())]

    @property
    def x_axis(self) -> str:
        """The loss curves' x axis: tokens_seen when the runs trained on text, else samples_seen."""
        return "tokens_seen" if self.curves["tokens_seen"].notna().any() else "samples_seen"

    def cell_runs(self, cell: int) -> pd.DataFrame:
        """The cell's done runs by repeat: repeat, run_id and final loss (the loss of its last step logged)."""
        curves = self.curves[self.curves["cell"] == cell]
        runs = curves.groupby(["repeat", "run_id"])["loss"].last().reset_index()
        return runs.rename(columns={"loss": "final loss"})


def read_results(store: RunStore, members: dict[tuple[int, int], Member]) -> list[RunResult]:
    """The done members' metric tables, read from their files (a run deleted meanwhile is left out)."""
    results = []
    for (cell, repeat), member in sorted(members.items()):
        if not member.done:
            continue
        try:
            results.append(RunResult(cell, repeat, member.run_id, store.read_metrics(member.run_id),
                                     store.read_evals(member.run_id)))
        except (OSError, ValueError):
            continue
    return results


def summarize(store: RunStore, spec: SweepSpec) -> Summary:
    """The summary of the sweep's runs on disk (done ones; the others count as missing)."""
    members = find_members(store, spec.sweep_id, sweep_runs(spec))
    return summary_of(spec, read_results(store, members), members)


def summary_of(spec: SweepSpec, results: list[RunResult], members: dict[tuple[int, int], Member]) -> Summary:
    """The summary of these runs' results (pure)."""
    all_cells = cells(spec)
    labels = {c.index: cell_label(c, spec) for c in all_cells}
    found = verdicts({c.index: c.config for c in all_cells}, labels,
                     {(r.cell, r.repeat): r.metrics["loss"].tolist() for r in results})
    rows = [_cell_row(spec, cell, labels[cell.index], [r for r in results if r.cell == cell.index],
                      [m for (c, _), m in sorted(members.items()) if c == cell.index and m.state in UNFINISHED_STATES])
            for cell in all_cells]
    table = _with_verdicts(pd.DataFrame(rows), found)
    return Summary(spec, table, tuple(found), _curves(results, labels), members)


def _cell_row(spec: SweepSpec, cell, label: str, results: list[RunResult],
              unfinished: list[Member]) -> dict[str, object]:
    config = cell.config
    row: dict[str, object] = {"cell": cell.index, "label": label, **dict(cell.settings),
                              "micro_batch_size": config.micro_batch_size, "accum_steps": config.accum_steps,
                              "effective_batch": config.effective_batch_size,
                              "runs": len(results), "repeats": spec.repeats, "complete": len(results) == spec.repeats,
                              "failed": sum(m.state == RunState.FAILED for m in unfinished),
                              "unfinished_runs": "; ".join(f"{m.run_id} {state_line(m.state, m.message)}"
                                                           for m in unfinished)}
    figures = [run_figures(r.metrics, r.evals) for r in results]
    for name in WITH_CI:
        row[f"{name}_mean"], row[f"{name}_ci"] = mean_ci(f[name] for f in figures)
    for name in MEAN_ONLY:
        row[name] = mean_ci(f[name] for f in figures)[0]
    row["run_ids"] = " ".join(r.run_id for r in results)
    return row


def _with_verdicts(table: pd.DataFrame, found: list[Verdict]) -> pd.DataFrame:
    """Each cell compared with its group's reference: coincides (True/False, empty outside a group), the
    reference's label, the largest relative loss difference and its step."""
    table = table.assign(coincides=pd.Series([None] * len(table), dtype=object), coincides_with="",
                         loss_max_diff=math.nan, loss_diff_step=math.nan)
    for verdict in found:
        reference = verdict.cells[0]
        table.loc[table["cell"] == reference, ["coincides", "loss_max_diff"]] = [verdict.coincide, 0.0]
        for cell, diff, step in zip(verdict.cells[1:], verdict.diffs, verdict.steps):
            at = table["cell"] == cell
            table.loc[at, "coincides"] = diff <= verdict.tolerance
            table.loc[at, "coincides_with"] = verdict.labels[0]
            table.loc[at, "loss_max_diff"] = diff
            table.loc[at, "loss_diff_step"] = math.nan if step is None else step
    return table


CURVE_COLUMNS = ("cell", "label", "repeat", "run_id", "step", "samples_seen", "tokens_seen", "loss")


def _curves(results: list[RunResult], labels: dict[int, str]) -> pd.DataFrame:
    frames = [r.metrics.reindex(columns=["step", "samples_seen", "tokens_seen", "loss"])
              .assign(cell=r.cell, label=labels[r.cell], repeat=r.repeat, run_id=r.run_id) for r in results]
    if not frames:
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    return pd.concat(frames, ignore_index=True)[list(CURVE_COLUMNS)]
