"""Where sft's records come from: (prompt, completion) pairs read from a .jsonl file (text_file), a saved data set
or parquet folder (data_dir, as hf-dataset reads it), or the bundled default (data/bundled/sft.jsonl, made by
tools/make_sft_data.py: nothing downloaded). The field names are prompt_field and completion_field; both take
part in the token cache's identity. Every tenth record is held out for validation, as for a corpus. pg's
rollouts (data side): PgCorpus, (prompt, completion, advantage, group) held out by group (data/bundled/pg.jsonl,
made by tools/make_pg_data.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data import hf_datasets
from gaccum_core.data.corpus import VALIDATION_EVERY, Corpus, field_of

BUNDLED = Path(__file__).with_name("bundled")
DEFAULT_DATA_DIR = "data"  # RunConfig.data_dir's default: sft then reads text_file, else the bundled records


def _fields(config: RunConfig) -> hf_datasets.Fields:
    """The (setting, field name) pairs a records task reads: sft's prompt and completion, pg's also its advantage
    and group (in PgCorpus' order)."""
    found = (("prompt_field", config.prompt_field), ("completion_field", config.completion_field))
    return found if config.dataset != "pg" else (*found, ("advantage_field", config.advantage_field),
                                                 ("group_field", config.group_field))


class RecordCorpus(Corpus):
    """The records of .jsonl files (a file, a folder or a glob of them): each line's (prompt, completion)."""

    dataset = "sft"  # in the token cache's identity

    def __init__(self, text_file: str, fields: hf_datasets.Fields, max_mb: int = 256) -> None:
        """ConfigError naming text_file when it names no readable .jsonl file (nothing is read yet)."""
        super().__init__(text_file, fields[0][1], max_mb)
        self.fields = fields
        for path in self.paths:
            if not path.lower().endswith(".jsonl"):
                raise ConfigError("text_file", text_file, f"a .jsonl file of records (one JSON object a line, with "
                                  f"{' and '.join(repr(f) for _, f in fields)}) for sft: {path} is not .jsonl")

    def identity(self) -> dict:
        """The shards' identity (Corpus.identity) with the fields read."""
        files = super().identity()["files"]
        return {"dataset": self.dataset, "files": files, **dict(self.fields)}

    def _document(self, line: str, number: int, path: str) -> tuple:
        """The line's (prompt, completion): ConfigError naming the field and the line when one is missing."""
        record = self._parsed(line, number, path)
        return tuple(field_of(record, setting, field, number, path) for setting, field in self.fields)


class PgCorpus(RecordCorpus):
    """pg's rollouts in .jsonl files: each line's (prompt, completion, advantage, group index); the held-out split
    goes by group (every tenth group, by first appearance, from the first), so a group stays in one split."""

    dataset = "pg"  # fields: (setting, name) of the prompt, completion, advantage and group fields, in that order

    def _document(self, line: str, number: int, path: str) -> tuple:
        """(prompt, completion, advantage, group id): ConfigError naming the field and the line when one is
        missing, an advantage is not a finite number, or a group is neither a string nor an integer."""
        record = self._parsed(line, number, path)
        texts = tuple(field_of(record, setting, field, number, path) for setting, field in self.fields[:2])
        (advantage_setting, advantage), (group_setting, group) = self.fields[2:]
        value, found = record.get(advantage), record.get(group)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(advantage_setting, advantage, f"a finite number in every line of {path}: line "
                              f"{number} has {value!r}")
        if isinstance(found, bool) or not isinstance(found, (str, int)):
            raise ConfigError(group_setting, group, f"a string or integer group id in every line of {path}: line "
                              f"{number} has {found!r}")
        return (*texts, float(value), str(found))

    def documents(self) -> Iterator[tuple[str, tuple]]:
        """("train" or "val", (prompt, completion, advantage, group index)): group g (by first appearance) is
        held out when g % VALIDATION_EVERY == 0."""
        return _by_group(super().documents(), self.fields[2], own_split=False)


def _by_group(rows: Iterator[tuple[str, tuple]], advantage_field: tuple[str, str],
              own_split: bool) -> Iterator[tuple[str, tuple]]:
    """pg's rows as (split, (prompt, completion, advantage, group index)), the groups numbered by first appearance:
    their own split (own_split), else group g held out when g % VALIDATION_EVERY == 0; ConfigError naming the
    advantage field for an advantage that is no finite number."""
    index: dict[str, int] = {}
    for split, (prompt, completion, advantage, group) in rows:
        if not math.isfinite(advantage):
            raise ConfigError(*advantage_field, f"a finite number in every record: one has {advantage!r}")
        number = index.setdefault(str(group), len(index))
        held = split if own_split else "val" if number % VALIDATION_EVERY == 0 else "train"
        yield held, (prompt, completion, float(advantage), number)


class SavedRows:
    """The rows of a saved data set or parquet folder (data_dir) as the token cache reads them: each one's
    text_field (hf-dataset), or with fields, each one's (prompt, completion) (sft) or pg's record (PgCorpus')."""

    def __init__(self, config: RunConfig, fields: hf_datasets.Fields | None = None) -> None:
        self.config, self.fields, self.name, self.bytes_read = config, fields, Path(config.data_dir).name, 0
        self._identity = self.identity()  # ConfigError naming data_dir when it is no such folder

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size, _ in self._identity["files"])

    def identity(self) -> dict:
        found = hf_datasets.identity(self.config, self.fields)
        return found if self.fields is None else {**found, "dataset": self.config.dataset}

    def documents(self) -> Iterator[tuple[str, str | tuple[str, ...]]]:
        self.bytes_read = 0
        rows = (hf_datasets.documents(self.config) if self.fields is None
                else hf_datasets.records(self.config, self.fields))
        if self.config.dataset == "pg":
            own = hf_datasets.has_validation(self.config, self.fields)
            rows = _by_group(rows, self.fields[2], own)
        for split, values in rows:
            texts = (values,) if self.fields is None else [v for v in values if isinstance(v, str)]
            self.bytes_read += sum(map(len, texts)) + 1  # about its bytes
            yield split, values


def record_source(config: RunConfig) -> RecordCorpus | SavedRows:
    """sft's or pg's records: text_file when set, else data_dir when it is not the default, else the bundled
    records (data/bundled/sft.jsonl, pg.jsonl)."""
    kind = PgCorpus if config.dataset == "pg" else RecordCorpus
    if config.text_file.strip():
        return kind(config.text_file, _fields(config), config.text_file_max_mb)
    if config.data_dir != DEFAULT_DATA_DIR:
        return SavedRows(config, _fields(config))
    return kind(str(BUNDLED / f"{config.dataset}.jsonl"), _fields(config), config.text_file_max_mb)
