"""The CUDA-graphs trap: torch.compile(mode="reduce-overhead") under gradient accumulation (pytorch #169545).

The mode records CUDA graphs; each micro-batch's forward starts a new graph generation, which hands the memory of
the previous backward's outputs back to the graphs, the window's .grad among them. On a GPU the case trains the
seeded mlp on BASE_CONFIG's first windows twice, eager and compiled, and records what torch raised or how far the
compiled .grad drifted; elsewhere it is shown, not run: torch's own message for it, from torch's own formatter.
Either way it carries gaccum's refusal of those settings (train.device.cuda_graphs_refusal).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from gaccum_core.config import ConfigError
from gaccum_core.words import first_line
from gaccum_core.data.load import load_data
from gaccum_core.lab.pitfalls.catalog import CUDA_PITFALLS, case_config
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.accumulation import plan_epoch
from gaccum_core.train.device import cuda_graphs_refusal, resolve_device
from gaccum_core.train.errors import CUDA_GRAPHS_OVERWRITTEN
from gaccum_core.train.weighting import sample_order

(KEY,) = CUDA_PITFALLS
WINDOWS = 3  # warm-up, recording, replay: cudagraph trees record a graph on its second call


@dataclass(frozen=True)
class CudaGraphsCase:
    """What the trap did on one device, or what torch raises for it where it cannot run."""

    device: str
    ran: bool  # trained on a CUDA device; False: shown, not run
    error: str  # torch's message: raised by the run, or (not run) the one torch gives for it
    max_grad_diff: float | None  # max |Δ .grad| against eager over the windows, where the run raised nothing
    refusal: str  # gaccum's one line for these settings on CUDA

    @property
    def verdict(self) -> str:
        """The case in one line."""
        if not self.ran:
            return f"Needs a CUDA device ({self.device} here): not run. On a GPU torch raises this:"
        if self.error:
            trap = CUDA_GRAPHS_OVERWRITTEN in self.error
            what = "a .grad overwritten by a later graph run" if trap else "another error than the trap's"
            return f"On {self.device} the compiled loop failed ({what}):"
        return (f"On {self.device} torch raised nothing, and the compiled .grad was {self.max_grad_diff:.1e} off "
                "eager's at most.")


def case_words() -> str:
    """What the case trains, read off its settings."""
    config = case_config(KEY)
    return (f"{config.model} on {config.dataset}, b={config.micro_batch_size}, k={config.accum_steps}, its first "
            f"{WINDOWS} windows from the same seeded weights, eager and torch.compile(mode={config.compile!r}); "
            "the gradient only (no step). Runs on a CUDA device.")


def torch_message() -> str:
    """What torch raises on touching a .grad a later CUDA-graph run overwrote, in its own words (no stack trace)."""
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager  # noqa: PLC0415 - 2 s to import

    try:
        return CUDAGraphTreeManager.format_dealloc_msg(None, is_grad_output=True)
    except TypeError:  # torch before 2.14: one message for every graph output
        return CUDAGraphTreeManager.format_dealloc_msg(None)


def run_cuda_graphs_case(device: torch.device | None = None) -> CudaGraphsCase:
    """The trap on `device` (the machine's default): run on CUDA, shown with torch's message elsewhere."""
    device = device or resolve_device("auto")
    config = case_config(KEY)
    refusal = str(ConfigError("compile", config.compile,
                              cuda_graphs_refusal("cuda", config.compile, config.accum_steps)))
    if device.type != "cuda":
        return CudaGraphsCase(str(device), False, torch_message(), None, refusal)
    try:
        return CudaGraphsCase(str(device), True, "", _grad_drift(device), refusal)
    except RuntimeError as exc:
        return CudaGraphsCase(str(device), True, first_line(exc, 2000), None, refusal)


def _grad_drift(device: torch.device) -> float:
    """Max |Δ .grad| between the compiled and the eager copy over WINDOWS windows, each zeroed (set to None) first
    and each micro-batch's mean loss divided by k, as the tutorials write it."""
    config = case_config(KEY)
    data = load_data(config)
    eager = build_seeded_model(config, data.input_shape, data.num_classes).to(device)
    compiled_copy = copy.deepcopy(eager)
    compiled = torch.compile(compiled_copy, mode=config.compile)
    order = sample_order(config, data.train, 0)
    drift = 0.0
    for window in plan_epoch(len(data.train), config.micro_batch_size, config.accum_steps)[:WINDOWS]:
        eager.zero_grad(set_to_none=True)
        compiled_copy.zero_grad(set_to_none=True)
        for micro in window.micro_batches:
            x, y = (t.to(device) for t in data.train.batch(order[micro.start:micro.stop]))
            for model in (eager, compiled):
                (torch.nn.functional.cross_entropy(model(x), y) / config.accum_steps).backward()
        drift = max(drift, *((a.grad - b.grad).abs().max().item()
                             for a, b in zip(compiled_copy.parameters(), eager.parameters())))
    return drift
