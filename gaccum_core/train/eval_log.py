"""When a training run evaluates (evaluation_due), and the row an evaluation logs (eval_row)."""

from __future__ import annotations

import math
from typing import Callable, Literal

from gaccum_core.train.checkpoint_state import Counters
from gaccum_core.train.evaluation import Evaluation

# The moments Engine.run asks about: on starting (a resumed run), after a step, at an epoch's end, at the run's end.
Moment = Literal["resumed", "step", "epoch", "end"]
Evaluated = Callable[[Moment, int], bool]  # (moment, epoch) -> False when a stop ended the evaluation


def evaluation_due(moment: Moment, eval_every: int, counters: Counters) -> bool:
    """Whether a run evaluates at this moment: every eval_every steps, else at each epoch's end, and at the end."""
    unevaluated = counters.step > counters.last_eval_step
    if moment == "resumed":  # stopped during this step's evaluation: do it now, as the run would have
        return bool(eval_every) and 0 < counters.step and counters.step % eval_every == 0 and unevaluated
    if moment == "step":
        return bool(eval_every) and counters.step % eval_every == 0
    if moment == "epoch":
        return not eval_every and unevaluated
    return unevaluated


def eval_row(epoch: int, step: int, result: Evaluation, sample: str | None, wall_time_s: float) -> dict:
    """The row an evaluation logs; a language model's (sample given) with its perplexity, targets and sample text."""
    text = sample is not None
    row = {"epoch": epoch, "step": step, "test_loss": result.loss, "test_accuracy": result.accuracy,
           "perplexity": math.exp(min(result.loss, 700.0)) if text else None,
           "eval_samples": result.samples, "eval_tokens": result.targets if text else None}
    if text:  # the run store writes the sample to samples.jsonl, not to eval.csv
        row["sample"] = sample
    return {**row, "wall_time_s": wall_time_s}
