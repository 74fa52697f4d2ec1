"""`hf-dataset`: a Hugging Face data set on disk, read as documents of text in batches, never whole.

data_dir is either a folder that `datasets`' save_to_disk wrote (Arrow files that load_from_disk memory-maps:
a DatasetDict's `train` split, with `validation`, or else `test`, for validation when present; a single
Dataset is all training rows), or a folder of .parquet files (read a batch of rows at a time with pyarrow;
named by split as the Hub names them, train-00000-of-00002.parquet or train/0000.parquet, they give their
splits). Each row's text_field is one document. Without a validation split every tenth row (row i with
i % 10 == 0, the text data set's rule) is held out. Nothing is downloaded: only local files are opened.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.words import first_line

SAVED_DICT, SAVED_ONE = "dataset_dict.json", "state.json"  # what save_to_disk leaves in the folder
VALIDATION_SPLITS = ("validation", "test")  # the first present is the validation split
VALIDATION_EVERY = 10
BATCH_ROWS = 1024
_SPLIT_NAMES = {"train": "train", "training": "train", "validation": "validation", "valid": "validation",
                "val": "validation", "dev": "validation", "eval": "validation", "test": "test"}
_SPLIT_RE = re.compile(r"^([a-z]+)(?:[-_.\d]|$)", re.IGNORECASE)
_FOLDER = "a folder written by datasets' save_to_disk, or of .parquet files"


@dataclass(frozen=True)
class _Part:
    """Rows of one table: a saved Dataset's split or a parquet file."""

    label: str
    schema: object  # pyarrow.Schema
    rows: int
    batches: Callable[[str], Iterator[list]]  # field → its values, a batch of rows at a time


@dataclass(frozen=True)
class _Layout:
    """The training parts, and the validation parts or None (every tenth row held out), of data_dir."""

    kind: str
    train: list[_Part]
    validation: list[_Part] | None
    splits: str  # in words, for the describe line


def _root(config: RunConfig) -> Path:
    """config.data_dir, which must be a folder."""
    root = Path(config.data_dir).expanduser()
    if not root.is_dir():
        there = "this is a file" if root.exists() else "there is no such folder"
        raise ConfigError("data_dir", config.data_dir, f"{_FOLDER}: {there}")
    return root


def _kind(config: RunConfig, root: Path) -> tuple[str, list[Path]]:
    """('save_to_disk', its files) or ('parquet', the .parquet files), sorted by path."""
    if (root / SAVED_DICT).is_file() or (root / SAVED_ONE).is_file():
        return "save_to_disk", sorted(p for p in root.rglob("*") if p.is_file())
    parquet = sorted(p for p in root.rglob("*.parquet") if p.is_file())
    if not parquet:
        raise ConfigError("data_dir", config.data_dir, f"{_FOLDER}: {root} holds neither {SAVED_DICT} nor "
                          f"{SAVED_ONE} (save_to_disk's) nor any .parquet file")
    return "parquet", parquet


def _split_of(path: Path, root: Path) -> str | None:
    """The split a parquet file's name (or its folder's) gives, as the Hub names them, or None."""
    relative = path.relative_to(root)
    for name in (relative.stem, *reversed(relative.parent.parts)):
        match = _SPLIT_RE.match(name)
        if match and match.group(1).lower() in _SPLIT_NAMES:
            return _SPLIT_NAMES[match.group(1).lower()]
    return None


def _parquet_part(path: Path) -> _Part:
    import pyarrow.parquet as pq

    def batches(field: str) -> Iterator[list]:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS, columns=[field]):
            yield batch.column(0).to_pylist()

    return _Part(str(path), pq.read_schema(path), pq.read_metadata(path).num_rows, batches)


def _parquet(config: RunConfig, root: Path, files: list[Path]) -> _Layout:
    """Train and validation files by their names when both are named, else every file with rows held out."""
    try:
        parts = {path: _parquet_part(path) for path in files}
    except Exception as exc:  # pyarrow's ArrowInvalid and OSError for a file that is not parquet
        raise ConfigError("data_dir", config.data_dir, f"{_FOLDER}: a .parquet file there cannot be read "
                          f"({first_line(exc)})") from None
    named = {path: _split_of(path, root) for path in files}
    train = [parts[p] for p in files if named[p] == "train"]
    held = next((s for s in VALIDATION_SPLITS if s in named.values()), None)
    if train and held:
        validation = [parts[p] for p in files if named[p] == held]
        return _Layout("parquet", train, validation, f"the {held} files")
    return _Layout("parquet", list(parts.values()), None, f"every {VALIDATION_EVERY}th row held out")


def _saved_part(dataset, label: str) -> _Part:
    def batches(field: str) -> Iterator[list]:
        # Plain Python values whatever format the dataset was saved with (numpy, torch...).
        for batch in dataset.with_format(None).select_columns([field]).iter(batch_size=BATCH_ROWS):
            yield batch[field]

    return _Part(label, dataset.data.schema, dataset.num_rows, batches)


def _saved(config: RunConfig, root: Path) -> _Layout:
    """A DatasetDict's train and validation (or test) splits, or a single Dataset with rows held out."""
    import datasets  # on use: it takes seconds to import

    try:
        saved = datasets.load_from_disk(str(root))  # memory-maps the Arrow files
    except Exception as exc:  # its FileNotFoundError, json or Arrow errors for a damaged folder
        raise ConfigError("data_dir", config.data_dir, f"{_FOLDER}: load_from_disk cannot read it "
                          f"({first_line(exc)})") from None
    if isinstance(saved, datasets.Dataset):
        return _Layout("save_to_disk", [_saved_part(saved, str(root))], None,
                       f"every {VALIDATION_EVERY}th row held out")
    if "train" not in saved:
        raise ConfigError("data_dir", config.data_dir, f"a saved DatasetDict with a 'train' split: its splits are "
                          f"{', '.join(map(repr, saved))}")
    train = [_saved_part(saved["train"], f"split 'train' of {root}")]
    held = next((s for s in VALIDATION_SPLITS if s in saved), None)
    if held is None:
        return _Layout("save_to_disk", train, None, f"every {VALIDATION_EVERY}th row held out")
    return _Layout("save_to_disk", train, [_saved_part(saved[held], f"split {held!r} of {root}")],
                   f"the {held} split")


Fields = tuple[tuple[str, str], ...]  # (setting, field name) of each field read: text_field, or sft's two


def _text(config: RunConfig) -> Fields:
    return (("text_field", config.text_field),)


def _checked(config: RunConfig, fields: Fields) -> _Layout:
    """data_dir's layout, each field a field of its kind (_check_field) in every part, enough rows in each split."""
    root = _root(config)
    kind, files = _kind(config, root)
    layout = _saved(config, root) if kind == "save_to_disk" else _parquet(config, root, files)
    for part in layout.train + (layout.validation or []):
        for setting, field in fields:
            _check_field(setting, field, part)
    rows = sum(p.rows for p in layout.train)
    if layout.validation is None and rows < 2:
        raise ConfigError("data_dir", config.data_dir, f"a data set of at least 2 rows, one for training and one "
                          f"for validation: it has {rows}")
    if layout.validation is not None and (rows == 0 or sum(p.rows for p in layout.validation) == 0):
        raise ConfigError("data_dir", config.data_dir, f"a data set whose train and {layout.splits} hold rows: "
                          "one is empty")
    return layout


def _check_field(setting: str, field: str, part: _Part) -> None:
    """ConfigError naming the setting (text_field...) unless the part has field as a column of its kind: text, or
    for pg's advantage_field numbers and its group_field text or integers."""
    if field not in part.schema.names:
        names = ", ".join(map(repr, part.schema.names[:20]))
        raise ConfigError(setting, field, f"a field of {part.label}: its fields are {names} (set {setting}, "
                          f"--{setting.replace('_', '-')}, to the one holding the text)")
    kind = part.schema.field(field).type
    allowed, words = _KINDS.get(setting, (_is_text, "text"))
    if not allowed(kind):
        raise ConfigError(setting, field, f"a field of {words}: {field!r} of {part.label} holds {kind}")


def _is_text(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)


def _is_number(kind: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind)


def _is_group(kind: Any) -> bool:
    import pyarrow as pa

    return _is_text(kind) or pa.types.is_integer(kind)


# The fields of another kind than text (pg's), each one's check and its words
_KINDS = {"advantage_field": (_is_number, "numbers"), "group_field": (_is_group, "text or integers")}


def has_validation(config: RunConfig, fields: Fields) -> bool:
    """Whether data_dir holds a validation split of its own (else rows are held out)."""
    return _checked(config, fields).validation is not None


def documents(config: RunConfig) -> Iterator[tuple[str, str]]:
    """("train" or "val", text) of every row of config.data_dir, in order, a batch of rows read at a time;
    checked before the first is read (ConfigError naming data_dir or text_field). Rows without text (null)
    are skipped, but still counted by the every-tenth rule."""
    return _rows(_checked(config, _text(config)), (config.text_field,))


def records(config: RunConfig, fields: Fields) -> Iterator[tuple[str, tuple[str, ...]]]:
    """("train" or "val", (value of each field)) of every row of config.data_dir whose fields all hold values, as
    documents() reads them (sft's records: (prompt, completion); pg's with an advantage and a group); checked first."""
    rows = _rows(_checked(config, fields), [field for _, field in fields])
    return ((split, tuple(values)) for split, *values in rows)


def _rows(layout: _Layout, fields: tuple[str, ...] | list[str]) -> Iterator[tuple]:
    """(split, value of each field) of every row whose values are all there (a skipped row is still counted)."""
    row = 0
    for part in layout.train:
        for values in zip(*(part.batches(field) for field in fields)):
            for found in zip(*values):
                if None not in found:
                    yield ("val" if layout.validation is None and row % VALIDATION_EVERY == 0 else "train"), *found
                row += 1
    for part in layout.validation or []:
        for values in zip(*(part.batches(field) for field in fields)):
            yield from (("val", *found) for found in zip(*values) if None not in found)


def identity(config: RunConfig, fields: Fields | None = None) -> dict:
    """What a token cache of this data set is keyed by: the folder, each file's path, size and modification
    time (and a saved dataset's fingerprints), and the fields read (text_field). Reads no rows."""
    root = _root(config)
    kind, files = _kind(config, root)
    stamps = [[str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns] for p in files]
    found = {str(p.parent.relative_to(root)): _fingerprint(p) for p in files if p.name == SAVED_ONE}
    read = {"text_field": config.text_field} if fields is None else dict((s, f) for s, f in fields)
    return {"dataset": "hf-dataset", "kind": kind, "data_dir": str(root.resolve()), "files": stamps,
            "fingerprints": found, **read}


def _fingerprint(state: Path) -> str | None:
    try:
        return json.loads(state.read_text(encoding="utf-8")).get("_fingerprint")
    except (OSError, ValueError, AttributeError):
        return None


def describe_hf_dataset(config: RunConfig) -> str:
    """One line: rows of each split and where validation comes from (tokenises nothing)."""
    layout = _checked(config, _text(config))
    train = sum(p.rows for p in layout.train)
    if layout.validation is None:
        held = -(-train // VALIDATION_EVERY)
        train, validation = train - held, held
    else:
        validation = sum(p.rows for p in layout.validation)
    return (f"hf-dataset: {train:,} train / {validation:,} validation rows of {config.text_field!r} "
            f"({layout.kind}, {layout.splits})")
