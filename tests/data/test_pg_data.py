"""pg's bundled rollouts: groups of at least 4 completions of varied lengths, each advantage (r - mean) / (std + 1e-4)
of its group's rewards (unbiased std), 0 where the std is 0; the file is what tools/make_pg_data.py writes."""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict

import numpy as np
import pytest

from gaccum_core.data.records import BUNDLED

PG = BUNDLED / "pg.jsonl"


def _groups() -> dict[str, list[dict]]:
    groups = defaultdict(list)
    for line in PG.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        groups[record["group"]].append(record)
    return groups


def test_groups_of_at_least_four_with_advantages_from_their_rewards():
    groups = _groups()
    assert len(groups) >= 40 and min(len(g) for g in groups.values()) >= 4
    equal = 0
    for records in groups.values():
        rewards = np.array([r["reward"] for r in records])
        std = rewards.std(ddof=1)
        expected = np.zeros_like(rewards) if std == 0 else (rewards - rewards.mean()) / (std + 1e-4)
        np.testing.assert_allclose([r["advantage"] for r in records], expected, rtol=0, atol=1e-5)
        equal += std == 0
        assert len({r["prompt"] for r in records}) == 1
    lengths = [len(r["completion"]) for g in groups.values() for r in g]
    assert equal >= 1 and max(lengths) > 4 * min(lengths)  # a group of equal rewards; completions of varied lengths


@pytest.mark.parametrize("task", ["sft", "pg"])
def test_each_bundled_file_is_what_its_script_writes(tmp_path, monkeypatch, task):
    """gaccum_core/data/bundled/TASK.jsonl is tools/make_TASK_data.py's output, byte for byte."""
    name = f"make_{task}_data"
    spec = importlib.util.spec_from_file_location(name, BUNDLED.parents[2] / "tools" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    monkeypatch.setattr(script, "OUT", tmp_path / f"{task}.jsonl")
    script.main()
    assert (tmp_path / f"{task}.jsonl").read_bytes() == (BUNDLED / f"{task}.jsonl").read_bytes()
