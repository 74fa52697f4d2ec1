"""The command line's progress bars on stderr: a run's optimizer steps until it ends, a plan's candidates."""

from __future__ import annotations

import sys

from tqdm import tqdm

from gaccum_core.plan.planner import Plan, PlanRequest, make_plan
from gaccum_core.plan.search import Candidate
from gaccum_core.runs.runner import Runner
from gaccum_core.runs.snapshot import RunSnapshot
from gaccum_core.states import RunState


def follow_to_the_end(runner: Runner, run_id: str) -> int:
    """Progress bar until the run ends, its message, its directory last; exit status 0, 130 (stopped) or 1."""
    snapshot = follow(runner, run_id)
    if snapshot.message:
        print(f"{snapshot.state}: {snapshot.message}", file=sys.stderr)
    print(runner.store.path(run_id).resolve())
    return {RunState.FINISHED: 0, RunState.STOPPED: 130}.get(snapshot.state, 1)


SECOND_CTRL_C = ("stopped by a second Ctrl-C before it had saved its state: it resumes from its last "
                 "checkpoint")


def follow(runner: Runner, run_id: str) -> RunSnapshot:
    """Draw a progress bar until the run ends. Ctrl-C stops the run and waits for it (one micro-batch or
    evaluation batch, and the checkpoint); a second Ctrl-C stops waiting, the run marked stopped on disk."""
    bar = tqdm(total=None, unit="step", desc=run_id, file=sys.stderr, dynamic_ncols=True)
    try:
        while not (snap := runner.wait(run_id, timeout=0.2)).done:
            _draw(bar, snap)
    except KeyboardInterrupt:
        runner.stop(run_id)
        bar.write(f"stopping {run_id}: it saves a checkpoint first (Ctrl-C again to stop waiting)", file=sys.stderr)
        try:
            snap = runner.wait(run_id)
        except KeyboardInterrupt:
            runner.abandon(run_id, SECOND_CTRL_C)
            snap = runner.snapshot(run_id)
    _draw(bar, snap)
    bar.close()
    return snap


def _draw(bar: tqdm, snap: RunSnapshot) -> None:
    if snap.total_steps and bar.total != snap.total_steps:
        bar.reset(total=snap.total_steps)
    bar.n = snap.steps_done
    if snap.metrics:
        last = snap.metrics[-1]
        postfix = {"loss": f"{last['loss']:.4f}", "skipped": last["skipped_total"]}
        if last["scale"] is not None:
            postfix["scale"] = f"{last['scale']:g}"
        if last.get("tokens_per_s") is not None:  # a language run
            postfix["tokens/s"] = f"{last['tokens_per_s']:.0f}"
        bar.set_postfix(postfix, refresh=False)
    bar.set_description(f"{snap.run_id} [{snap.state}]", refresh=False)
    bar.refresh()


def measure_with_progress(request: PlanRequest) -> Plan:
    """make_plan with a progress bar on stderr (candidates measured, of at most how many, time left)."""
    bar = tqdm(total=None, unit="candidate", desc="planning", file=sys.stderr, dynamic_ncols=True)

    def progress(done: int, at_most: int, candidate: Candidate | None, _seconds: float) -> None:
        if bar.total != at_most:
            bar.total = at_most
        bar.n = done
        if candidate is not None:
            bar.set_postfix_str(f"{candidate.options.label()} b={candidate.micro_batch_size}: {candidate.status}",
                                refresh=False)
        bar.refresh()

    try:
        return make_plan(request, progress)
    finally:
        bar.close()
