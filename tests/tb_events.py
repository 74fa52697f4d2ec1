"""Reading TensorBoard event files back as TensorBoard itself reads them: what the TensorBoard tests share."""

from __future__ import annotations

import math
from pathlib import Path

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from tensorboard.plugins.hparams import metadata

KEEP_ALL = {event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}  # no reservoir sampling


def event_files(directory: Path) -> list[Path]:
    """The event files of a folder, in the order TensorBoard reads them."""
    return sorted(directory.glob("events.out.tfevents.*"))


def accumulated(directory: Path) -> event_accumulator.EventAccumulator:
    """Every event of the folder's files, as TensorBoard's EventAccumulator loads them."""
    accumulator = event_accumulator.EventAccumulator(str(directory), size_guidance=KEEP_ALL)
    accumulator.Reload()
    return accumulator


def scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of each scalar tag."""
    accumulator = accumulated(directory)
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def raw_tags(directory: Path) -> list[tuple[str, int]]:
    """(tag, step) of every summary value in every event file, repeats included (no purge, no sampling)."""
    return [(value.tag, event.step) for path in event_files(directory) for event in EventFileLoader(str(path)).Load()
            for value in event.summary.value]


def hparams(directory: Path) -> tuple[dict[str, object], list[str], int | None]:
    """The session's hyperparameters, the experiment's metric names and the session's end status (None: no end)."""
    content = accumulated(directory).PluginTagToContent(metadata.PLUGIN_NAME)
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    values = {name: getattr(value, value.WhichOneof("kind")) for name, value in start.hparams.items()}
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    metrics = [info.name.tag for info in experiment.metric_infos]
    end = content.get(metadata.SESSION_END_INFO_TAG)
    return values, metrics, None if end is None else metadata.parse_session_end_info_plugin_data(end).status


def same_float32(a: float, b: float) -> bool:
    """Equal as float32 (what an event file holds), NaN equal to NaN."""
    import numpy as np

    x, y = float(np.float32(a)), float(np.float32(b))
    return (math.isnan(x) and math.isnan(y)) or x == y
