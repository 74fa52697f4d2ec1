"""The server's device line on a GPU (issue 41 item 7): computed as the server computes it (torch's CUDA count,
then nvidia-smi) in a fresh process, it leaves torch.cuda uninitialised and no GPU's primary context active; each
cuda:i it names is the GPU torch calls cuda:i (same UUID), under CUDA_VISIBLE_DEVICES too, and its total memory
is the one CUDA reports.

Marked `cuda`; skipped with the reason "no CUDA device" without one. Imports no streamlit (the server's
_look_at_devices is gpu_count() then gpus.look(), called here directly).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]

ROOT = Path(__file__).resolve().parents[2]
# The line first, then libcuda asked whether any device's primary context is active (cuDevicePrimaryCtxGetState
# creates none), then torch initialised to say which GPU each cuda:i is and how much memory CUDA counts.
_PROBE = """
import ctypes, json, torch
from gaccum_core.train.device import gpu_count
from gaccum_core.train.gpus import describe_devices, look, visible_gpus

facts = look(gpu_count())
lines = describe_devices(facts, {})
{warm_up}
initialised = torch.cuda.is_initialized()
libcuda = ctypes.CDLL("libcuda.so.1")
assert libcuda.cuInit(0) == 0
active = []
for i in range(facts.cuda_count):
    device, flags, state = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
    assert libcuda.cuDeviceGet(ctypes.byref(device), i) == 0
    assert libcuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(state)) == 0
    active.append(state.value)
shown = visible_gpus(facts.gpus, facts.visible_spec)[:facts.cuda_count]
print(json.dumps({
    "lines": lines, "problem": facts.smi_problem, "initialised": initialised, "active": active,
    "shown": [[g.smi_index, g.uuid, g.total] if g else None for g in shown],
    "torch": [[str(torch.cuda.get_device_properties(i).uuid), torch.cuda.mem_get_info(i)[1]]
              for i in range(facts.cuda_count)]}))
"""
# What the rest of the server's warm-up asks of the device: the default settings checked (on the fake data: a GPU
# image may lack scikit-learn, which the default digits need) and the Train page's loop drawn.
_WARM_UP = """
from gaccum_core.config import DEFAULT_RUN
from gaccum_core.lab.loopcode import render_loop
from gaccum_core.train.checks import preflight
from gaccum_core.train.device import device_choices, processes_note
preflight(DEFAULT_RUN.replace(dataset="fake", fake_samples=256))
render_loop(DEFAULT_RUN)
device_choices(), processes_note(DEFAULT_RUN.device)
"""


def _probe(warm_up: str = "", **env: str) -> dict:
    """The probe's findings in a fresh process (after warm_up's code), with env added to this one's."""
    done = subprocess.run([sys.executable, "-c", _PROBE.replace("{warm_up}", warm_up)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _uuid(text: str) -> str:
    return text.lower().removeprefix("gpu-")


def _same_gpus(found: dict) -> None:
    """Each cuda:i the line names is torch's cuda:i, and its total memory the one CUDA counts (within 2%:
    NVML counts memory CUDA reserves)."""
    if any(gpu is None for gpu in found["shown"]) and not found["problem"]:
        pytest.skip(f"nvidia-smi lists no GPU for a visible device (a MIG instance?): {found['lines']}")
    assert not found["problem"], found["lines"]
    for (index, uuid, total), (torch_uuid, cuda_total) in zip(found["shown"], found["torch"], strict=True):
        assert _uuid(uuid) == _uuid(torch_uuid), (index, found["lines"])
        assert abs(total - cuda_total) <= 0.02 * cuda_total, (total, cuda_total)


def test_the_device_line_creates_no_cuda_context_and_names_each_gpu_as_torch_does():
    found = _probe()
    print(f"\nfigure: {' / '.join(found['lines'])}")
    assert found["initialised"] is False
    assert found["active"] == [0] * torch.cuda.device_count(), "a primary context was made for the line"
    assert len(found["lines"]) >= torch.cuda.device_count() and found["lines"][0].startswith("cuda:0 · ")
    names = {line.split(" · ")[1] for line in found["lines"] if line.startswith("cuda:")}
    if len(names) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in found["lines"][-1]  # the numbering may differ: the line says so
    else:
        _same_gpus(found)


def test_cuda_visible_devices_reversed_by_index_and_by_uuid():
    shown = [gpu for gpu in _probe(CUDA_DEVICE_ORDER="PCI_BUS_ID")["shown"] if gpu is not None]
    if not shown:
        pytest.skip("nvidia-smi lists none of the visible GPUs (MIG instances?)")
    by_index = ",".join(str(index) for index, _, _ in reversed(shown))
    by_uuid = ",".join(uuid for _, uuid, _ in reversed(shown))
    for spec in (by_index, by_uuid):
        found = _probe(CUDA_VISIBLE_DEVICES=spec, CUDA_DEVICE_ORDER="PCI_BUS_ID")
        assert [gpu[1] for gpu in found["shown"]] == [uuid for _, uuid, _ in reversed(shown)], spec
        _same_gpus(found)


def test_the_rest_of_the_warm_up_creates_no_cuda_context_either():
    """torch.cuda may be initialised (resolve_device asks current_device), but no GPU holds a context for it."""
    found = _probe(_WARM_UP)
    assert found["active"] == [0] * torch.cuda.device_count(), "the warm-up's checks made a CUDA context"
