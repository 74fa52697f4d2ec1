"""Runs a pitfall, the correct loop and the big-batch reference for a number of optimizer steps.

The image pitfalls run their loops (loops.py) on one seeded model's copies; #6 runs on the engine
(sequences.py). The reference is the one-big-batch run: one batch of the window's samples per
optimizer step, per-sample mean loss. The exact accumulated loop equals it to rounding.
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any, Callable

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls import sequences
from gaccum_core.lab.pitfalls.catalog import CORRECT_SIDE, PITFALLS, case_config
from gaccum_core.lab.pitfalls.kit import Kit
from gaccum_core.lab.pitfalls.loops import LOOPS, Loop, big_batch, exact
from gaccum_core.lab.pitfalls.result import PitfallResult, Snapshot, compare
from gaccum_core.models.build import build_seeded_model

# #8 calls scheduler.step() before the first optimizer.step(), which PyTorch warns about; the gallery shows it.
_SCHEDULER_ORDER_WARNING = r"Detected call of `lr_scheduler.step\(\)` before `optimizer.step\(\)`"


def run_pitfall(key: str, steps: int = 20, **overrides: Any) -> PitfallResult:
    """Run one pitfall, the correct loop and the big-batch reference for `steps` optimizer steps."""
    if key not in PITFALLS:
        raise KeyError(f"unknown pitfall {key!r}: one of {', '.join(PITFALLS)}")
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", steps, "an integer ≥ 1")
    settings = {**PITFALLS[key].default, **overrides}
    if key == sequences.KEY:
        return sequences.run_sequences(steps, settings)
    train_samples = settings.get("train_samples", 0)
    config = case_config(key, **overrides)
    run = loop_runner(config, train_samples, steps)
    reference, pitfall = run(big_batch), run(LOOPS[key])
    correct_config = config.replace(**CORRECT_SIDE.get(key, {}))
    if correct_config != config:
        run = loop_runner(correct_config, train_samples, steps)
    correct_reference = reference if correct_config == config else run(big_batch)
    correct = run(exact)
    return compare(key, pitfall, reference, correct, correct_reference)


def run_all(steps: int = 20) -> list[PitfallResult]:
    """Every pitfall with its default settings, in PITFALLS order."""
    return [run_pitfall(key, steps) for key in PITFALLS]


def loop_runner(config: RunConfig, train_samples: int, steps: int) -> Callable[[Loop], list[Snapshot]]:
    """Runs loops on config's data (its first train_samples, 0: all), each from a deep copy of one initial model."""
    data = load_data(config)
    num_samples = train_samples or len(data.train)
    if not config.micro_batch_size <= num_samples <= len(data.train):
        raise ConfigError("train_samples", train_samples,
                          f"0 (all) or from micro_batch_size to {len(data.train)}, the size of {config.dataset}")
    model = build_seeded_model(config, data.input_shape, data.num_classes)

    def run(loop: Loop) -> list[Snapshot]:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_SCHEDULER_ORDER_WARNING)
            return list(itertools.islice(loop(Kit(config, data.train, model, num_samples, steps)), steps))

    return run
