"""A sweep's progress on stderr: a bar over its runs (done of all, the run training, time left) on a
terminal, whole lines elsewhere; Ctrl-C stops the sweep (the run training saves its state first)."""

from __future__ import annotations

import math
import sys
import time

from tqdm import tqdm

from gaccum_core.sweeps.job import SweepJob, SweepProgress

LINE_EVERY_S = 10.0  # away from a terminal: seconds between progress lines while nothing else changes


def follow_sweep(job: SweepJob, every_s: float = LINE_EVERY_S) -> SweepProgress:
    """Show the sweep's progress until it ends; a first Ctrl-C stops it and waits, a second stops waiting."""
    shown = _Bar(job) if sys.stderr.isatty() else _Lines(every_s)
    try:
        while not job.wait(0.2):
            shown.draw(job.progress())
    except KeyboardInterrupt:
        job.stop()
        _say(f"stopping sweep {job.sweep_id}: the run training saves a checkpoint first; the same command "
             "resumes the sweep")
        job.wait()
    progress = job.progress()
    shown.draw(progress)
    shown.close()
    return progress


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _now_training(progress: SweepProgress) -> str:
    """'20261124-… step 40 of 69' for each run training, joined."""
    return ", ".join(f"{s.name or s.run_id} step {s.steps_done} of {s.total_steps or '?'}" for s in progress.current)


def progress_line(progress: SweepProgress) -> str:
    """'sweep 1a2b3c4d5e [running] 3 of 8 runs done (2 skipped as done before) · 0 failed · … · 00:12 left'."""
    parts = [f"sweep {progress.sweep_id} [{progress.state}] {progress.done} of {progress.total} runs done"
             + (f" ({progress.skipped} done before)" if progress.skipped else "")]
    if progress.failed:
        parts.append(f"{progress.failed} failed")
    if progress.current:
        parts.append(_now_training(progress))
    if progress.eta_s is not None:
        parts.append(f"{tqdm.format_interval(progress.eta_s)} left")
    if progress.message:
        parts.append(progress.message)
    return " · ".join(parts)


class _Bar:
    """A terminal's bar over the sweep's runs."""

    def __init__(self, job: SweepJob) -> None:
        self.bar = tqdm(total=len(job.runs), unit="run", desc=f"sweep {job.sweep_id}", file=sys.stderr,
                        dynamic_ncols=True)

    def draw(self, progress: SweepProgress) -> None:
        """The runs done, the run training and the time left."""
        self.bar.n = progress.done + progress.failed
        postfix = _now_training(progress)
        if progress.eta_s is not None:
            postfix += f" · {tqdm.format_interval(progress.eta_s)} left"
        self.bar.set_postfix_str(postfix, refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        """Leave the bar drawn as it ended."""
        self.bar.close()


class _Lines:
    """Whole lines for a pipe or a file: one when a run starts or ends, else at most one every `every_s`."""

    def __init__(self, every_s: float) -> None:
        self.every_s, self._said_at, self._said = every_s, -math.inf, None

    def draw(self, progress: SweepProgress) -> None:
        """A line when news is due."""
        news = (progress.state, progress.done, progress.failed, tuple(s.run_id for s in progress.current))
        now = time.monotonic()
        if news != self._said or now - self._said_at >= self.every_s:
            _say(progress_line(progress))
            self._said_at, self._said = now, news

    def close(self) -> None:
        """Nothing is left open."""
