"""The command line's progress bars on stderr: a run's optimizer steps until it ends, a plan's candidates."""

from __future__ import annotations

import math
import sys
import time

from tqdm import tqdm

from gaccum_core.data.tokenising import TOKENISING
from gaccum_core.plan.planner import Plan, PlanRequest, make_plan
from gaccum_core.plan.search import Candidate
from gaccum_core.execution.runner import Runner
from gaccum_core.execution.snapshot import RunSnapshot
from gaccum_core.states import RunState, state_line
from gaccum_core.views.plan import candidate_words, progress_text


def follow_to_the_end(runner: Runner, run_id: str) -> int:
    """Progress bar until the run ends, its message, its directory last; exit status 0, 130 (stopped) or 1."""
    snapshot = follow(runner, run_id)
    if snapshot.message:
        print(state_line(snapshot.state, snapshot.message), file=sys.stderr)
    print(runner.store.path(run_id).resolve())
    return {RunState.FINISHED: 0, RunState.STOPPED: 130}.get(snapshot.state, 1)


LINE_EVERY_S = 10.0  # away from a terminal: seconds between progress lines
SECOND_CTRL_C = "stopped by a second Ctrl-C before it had saved its state"


def follow(runner: Runner, run_id: str, every_s: float = LINE_EVERY_S) -> RunSnapshot:
    """Show the run's progress until it ends: a bar on a terminal, else a line every `every_s` seconds.
    Ctrl-C stops the run and waits for it (one micro-batch or evaluation batch, and the checkpoint); a
    second Ctrl-C stops waiting, the run marked stopped on disk."""
    shown = _Bar(run_id) if sys.stderr.isatty() else _Lines(every_s)
    try:
        while not (snap := runner.wait(run_id, timeout=0.2)).done:
            shown.draw(snap)
    except KeyboardInterrupt:
        runner.stop(run_id)
        shown.say(f"stopping {run_id}: it saves a checkpoint first (Ctrl-C again to stop waiting)")
        try:
            snap = runner.wait(run_id)
        except KeyboardInterrupt:
            has_checkpoint = runner.store.checkpoint_path(run_id).exists()
            runner.abandon(run_id, SECOND_CTRL_C + (": it resumes from its last checkpoint" if has_checkpoint
                                                    else ": it has no checkpoint to resume from, start it again"))
            snap = runner.snapshot(run_id)
    shown.draw(snap, last=True)
    shown.close()
    return snap


def _figures(snap: RunSnapshot) -> dict[str, str]:
    """The latest step's loss, skipped steps, loss scale (fp16) and tokens/s (a language run)."""
    if not snap.metrics:
        return {}
    last = snap.metrics[-1]
    figures = {"loss": f"{last['loss']:.4f}", "skipped": str(last["skipped_total"])}
    if last["scale"] is not None:
        figures["scale"] = f"{last['scale']:g}"
    if last.get("tokens_per_s") is not None:
        figures["tokens/s"] = f"{last['tokens_per_s']:.0f}"
    return {**figures, **_evaluation(snap)}


def _evaluation(snap: RunSnapshot) -> dict[str, str]:
    """The latest evaluation and what it covered: 'perplexity 12.3 over 6,400 tokens' for a language run,
    'test acc 0.912 over 360 images' else (a run written before eval_samples: without the coverage)."""
    if not snap.evals:
        return {}
    last, text = snap.evals[-1], snap.config.is_text
    name, value = ("perplexity", last.get("perplexity")) if text else ("test acc", last.get("test_accuracy"))
    if value is None:
        return {}
    covered = last.get("eval_tokens" if text else "eval_samples")
    over = f" over {covered:,} {'tokens' if text else 'images'}" if covered is not None else ""
    return {name: f"{value:.4g}{over}" if text else f"{value:.3f}{over}"}


class _Bar:
    """A terminal's progress bar, redrawn in place."""

    def __init__(self, run_id: str) -> None:
        self.bar = tqdm(total=None, unit="step", desc=run_id, file=sys.stderr, dynamic_ncols=True)

    def draw(self, snap: RunSnapshot, last: bool = False) -> None:
        """Move the bar to the run's step, with its latest figures."""
        if snap.total_steps and self.bar.total != snap.total_steps:
            self.bar.reset(total=snap.total_steps)
        self.bar.n = snap.steps_done
        if _tokenising(snap):
            self.bar.set_postfix_str(snap.message, refresh=False)
        else:
            self.bar.set_postfix(_figures(snap), refresh=False)
        self.bar.set_description(f"{snap.run_id} [{snap.state}]", refresh=False)
        self.bar.refresh()

    def say(self, text: str) -> None:
        """A line above the bar."""
        self.bar.write(text, file=sys.stderr)

    def close(self) -> None:
        """Leave the bar drawn as it ended."""
        self.bar.close()


class _Lines:
    """Progress for a pipe or a file, where a bar redrawn with carriage returns is unreadable: whole lines,
    one when the state changes, else at most one every `every_s` seconds, and one at the end."""

    def __init__(self, every_s: float) -> None:
        self.every_s, self._said_at, self._said = every_s, -math.inf, ("", -1, False)

    def draw(self, snap: RunSnapshot, last: bool = False) -> None:
        """A line on the run's step, of how many, its figures and the time left (or how its tokenising goes),
        when one is due."""
        now = time.monotonic()
        tokenising = _tokenising(snap)
        news = (snap.state, snap.steps_done) != self._said[:2] or tokenising
        changed = (snap.state, tokenising) != (self._said[0], self._said[2])
        if last or (news and (changed or now - self._said_at >= self.every_s)):
            self.say(_line(snap))
            self._said_at, self._said = now, (snap.state, snap.steps_done, tokenising)

    @staticmethod
    def say(text: str) -> None:
        """One whole line on stderr, at once."""
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Nothing is left open."""


def _tokenising(snap: RunSnapshot) -> bool:
    """Whether the run is tokenising its corpus before its first step (its message says how far)."""
    return snap.state == RunState.RUNNING and not snap.steps_done and snap.message.startswith(TOKENISING)


def _line(snap: RunSnapshot) -> str:
    """'RUN_ID [running] step 40 of 200 (20%) · loss 1.2345 · skipped 0 · 00:12 left', while it tokenises
    'RUN_ID [running] tokenising corpus.jsonl: 12 of 100 MB · 3.1 MB/s · ...', and before its steps are counted
    'RUN_ID [running] starting: loading its data and model…'."""
    if _tokenising(snap):
        return f"{snap.run_id} [{snap.state}] {snap.message}"
    if snap.state == RunState.RUNNING and not snap.total_steps:  # its steps not counted yet: data, model loading
        return f"{snap.run_id} [{snap.state}] starting: loading its data and model…"
    step = f"step {snap.steps_done} of {snap.total_steps or '?'}"
    if snap.total_steps:
        step += f" ({snap.steps_done / snap.total_steps:.0%})"
    parts = [f"{snap.run_id} [{snap.state}] {step}", *(f"{k} {v}" for k, v in _figures(snap).items())]
    if snap.eta_s is not None:
        parts.append(f"{tqdm.format_interval(snap.eta_s)} left")
    return " · ".join(parts)


def measure_with_progress(request: PlanRequest) -> Plan:
    """make_plan with a progress bar on stderr (memory probes and timed steps done, of about how many, time
    left); away from a terminal, a line per probe or step."""
    lines = not sys.stderr.isatty()
    bar = tqdm(total=None, unit="step", desc="planning", file=sys.stderr, dynamic_ncols=True, disable=lines)

    def progress(done: int, about: int, candidate: Candidate | None, seconds: float) -> None:
        if lines:
            _Lines.say(f"planning: {progress_text(done, about, candidate, seconds)}")
            return
        if bar.total != about:
            bar.total = about
        bar.n = done
        if candidate is not None:
            bar.set_postfix_str(candidate_words(candidate), refresh=False)
        bar.refresh()

    try:
        return make_plan(request, progress)
    finally:
        bar.close()
