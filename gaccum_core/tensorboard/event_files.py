"""TensorBoard event files as plain Python: the folders under a directory that hold them, and what one folder's
files say (each scalar tag's points, the hparams, the text summaries), read with tensorboard's EventAccumulator,
every point kept.

One folder of event files is one run, as TensorBoard shows it (Lightning's version_0/, a Trainer's runs/<date>/,
a SummaryWriter's log_dir). The one exception is torch's add_hparams trap (pytorch #32651): it writes the hparams
into a new folder named by the time, under the run's own; such a folder is read as part of the run above it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENT_FILE_MARK = ".tfevents."  # events.out.tfevents.<time>.<host>...: every writer names its files so
TEXT_SUFFIX = "/text_summary"  # torch's add_text("args") writes the tag args/text_summary
LIGHTNING_HPARAMS = "hparams.yaml"  # Lightning's TensorBoardLogger saves the hparams there too
MAX_FOLDERS = 20_000  # folders looked through for event files, at most


class EventFilesError(ValueError):
    """A directory holds no event files that can be read; the message says why in one line."""


@dataclass(frozen=True)
class Point:
    """One scalar as logged: the step, when (seconds since the epoch) and the value (float32 in the file)."""

    step: int
    wall_time: float
    value: float


@dataclass
class EventFolder:
    """What one run's event files hold: scalars by tag, hparams by name, texts by tag, the files read."""

    path: Path
    scalars: dict[str, list[Point]] = field(default_factory=dict)
    hparams: dict[str, Any] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def merge(self, other: EventFolder) -> None:
        """Take in a folder of this run's hparams (torch's add_hparams trap): what this one lacks."""
        for name, value in other.hparams.items():
            self.hparams.setdefault(name, value)
        for tag, points in other.scalars.items():
            self.scalars.setdefault(tag, points)
        self.files += [str(Path(other.path.name) / name) for name in other.files]


def event_folders(root: Path) -> list[Path]:
    """Every folder at or under root that holds event files itself, sorted (symbolic links not followed);
    EventFilesError when root holds more than MAX_FOLDERS folders (a home or / typed by mistake)."""
    found = []
    for seen, (folder, _, files) in enumerate(os.walk(root), start=1):
        if seen > MAX_FOLDERS:
            raise EventFilesError(f"{root} holds more than {MAX_FOLDERS} folders: name the folder of the runs "
                                  "(a lightning_logs, a Trainer's runs/)")
        if any(EVENT_FILE_MARK in name for name in files):
            found.append(Path(folder))
    return sorted(found)


def read_event_folders(root: Path) -> list[EventFolder]:
    """The event folders under root, each read; EventFilesError when root is no directory or holds none."""
    if not root.is_dir():
        raise EventFilesError(f"{root} is not a directory" if root.exists() else f"{root} does not exist")
    folders = event_folders(root)
    if not folders:
        raise EventFilesError(f"{root} holds no TensorBoard event files (events.out.tfevents.*), nor do its folders")
    read = {path: read_folder(path) for path in folders}
    runs = []
    for path, folder in read.items():
        parent = path.parent
        if path != root and parent in read and _is_hparams_folder(folder):
            read[parent].merge(folder)
        else:
            runs.append(folder)
    return runs


def _is_hparams_folder(folder: EventFolder) -> bool:
    """A folder torch's add_hparams made: named by the time (time.time()), holding hparams."""
    try:
        float(folder.path.name)
    except ValueError:
        return False
    return bool(folder.hparams)


def read_folder(path: Path) -> EventFolder:
    """The scalars, hparams and texts of the event files in path (not its sub-folders); EventFilesError when
    tensorboard cannot read them."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    accumulator = ea.EventAccumulator(str(path), size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    try:
        accumulator.Reload()
    except Exception as exc:  # noqa: BLE001 - a damaged file: protobuf's or tensorboard's own errors
        raise EventFilesError(f"the event files in {path} cannot be read ({type(exc).__name__}: "
                              f"{str(exc)[:200]})") from None
    folder = EventFolder(path, files=sorted(p.name for p in path.iterdir() if EVENT_FILE_MARK in p.name))
    tags = accumulator.Tags()
    for tag in tags.get("scalars", []):
        folder.scalars[tag] = [Point(e.step, e.wall_time, e.value) for e in accumulator.Scalars(tag)]
    _read_tensors(accumulator, tags.get("tensors", []), folder)
    folder.hparams = {**_lightning_hparams(path), **_hparams(accumulator)}
    return folder


def _lightning_hparams(path: Path) -> dict[str, Any]:
    """Lightning's hparams.yaml beside its event files (written even when no hparams go into them): numbers,
    text and booleans only; {} without one, or one that does not read."""
    import yaml

    try:
        data = yaml.safe_load((path / LIGHTNING_HPARAMS).read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):  # none, or python objects safe_load refuses
        return {}
    return _plain_values(data)


def _read_tensors(accumulator: Any, tags: list[str], folder: EventFolder) -> None:
    """Scalars written as tensors (tf.summary v2, tensorboard's own writer) and the text summaries."""
    from tensorboard.util import tensor_util

    for tag in tags:
        plugin = accumulator.SummaryMetadata(tag).plugin_data.plugin_name
        events = accumulator.Tensors(tag)
        if plugin == "scalars":
            folder.scalars.setdefault(tag, [Point(e.step, e.wall_time, float(tensor_util.make_ndarray(e.tensor_proto)))
                                            for e in events])
        elif plugin == "text" and events:
            text = tensor_util.make_ndarray(events[-1].tensor_proto).flatten()
            if len(text):
                value = text[0]
                folder.texts[tag.removesuffix(TEXT_SUFFIX)] = value.decode("utf-8", "replace") \
                    if isinstance(value, bytes) else str(value)


def _hparams(accumulator: Any) -> dict[str, Any]:
    """The hparams of the HPARAMS plugin's session_start_info (add_hparams, Lightning), by name; {} without."""
    from tensorboard.plugins.hparams import metadata

    try:
        content = accumulator.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:
        return {}
    if metadata.SESSION_START_INFO_TAG not in content:
        return {}
    info = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    found = {}
    for name, value in info.hparams.items():
        kind = value.WhichOneof("kind")
        if kind in ("number_value", "string_value", "bool_value"):
            found[name] = getattr(value, kind)
    return found


def text_settings(texts: dict[str, str]) -> dict[str, Any]:
    """The settings the text summary `args` holds as a JSON object: the Hugging Face Trainer's TrainingArguments
    (its TensorBoardCallback writes them with add_text, no hparams); numbers, text and booleans only."""
    try:
        data = json.loads(texts.get("args", ""))
    except ValueError:
        return {}
    return _plain_values(data)


def _plain_values(data: object) -> dict[str, Any]:
    """The entries of a mapping whose values are numbers, text or booleans; {} for anything but a mapping."""
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, (int, float, str, bool))}
