"""Choosing the device once, and what it can do: processes, autocast precisions, torch.compile."""

from __future__ import annotations

import functools
import os
import subprocess
import sys

import torch

from gaccum_core.config import ConfigError
from gaccum_core.words import first_line
from gaccum_core.train.precision import DTYPES

COMPILE_TIMEOUT_S = 300
_COMPILE_PROBE = (
    "import torch\n"
    "f = torch.compile(lambda x: torch.nn.functional.relu(x @ x) + 1)\n"
    "x = torch.ones(8, 8, device={device!r})\n"
    "assert torch.allclose(f(x), torch.relu(x @ x) + 1)\n"
)


def gpu_count() -> int:
    """The CUDA devices of this machine: 0 without CUDA (torch.cuda asked no more where it is not available)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_choices() -> list[str]:
    """The device settings this machine offers: auto, cpu and each GPU (cuda:0, cuda:1, …)."""
    return ["auto", "cpu", *(f"cuda:{i}" for i in range(gpu_count()))]


def resolve_device(name: str) -> torch.device:
    """Turn a config device (auto | cpu | cuda | cuda:N) into a concrete torch.device."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise ConfigError("device", name, "cpu or auto: this machine has no CUDA device")
    index = int(name.split(":")[1]) if ":" in name else torch.cuda.current_device()
    count = gpu_count()
    if index >= count:
        raise ConfigError("device", name, f"cuda:0 to cuda:{count - 1}")
    return torch.device("cuda", index)


def device_name(device: torch.device) -> str:
    """A human name: the GPU's model, or 'CPU'."""
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} ({device})"
    return "CPU"


def memory_info(device: torch.device) -> tuple[int, int]:
    """(free, total) bytes on the device; host RAM for the CPU."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)
    import psutil  # noqa: PLC0415 - the CPU's only: a GPU image may not carry it

    vm = psutil.virtual_memory()
    return vm.available, vm.total


def bf16_emulated(device_type: str, capability: tuple[int, int], name: str) -> str | None:
    """Why bfloat16 autocast is refused on this GPU, or None: below compute capability 8.0 (Ampere) bfloat16 is
    emulated, slowly, and torch.cuda.is_bf16_supported() still says yes there (it counts emulation)."""
    if device_type != "cuda" or tuple(capability) >= (8, 0):
        return None
    major, minor = capability
    return (f"{name} has compute capability {major}.{minor}, below 8.0: bfloat16 is only emulated there, slowly "
            "(use fp16)")


def autocast_works(device: torch.device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether a small matmul runs under autocast(dtype) here, and why not when it fails. On a GPU nothing is run
    (a tensor there would leave a CUDA context in the server that asks, for its whole life): CUDA's autocast has
    fp16 on every GPU torch runs on, and bfloat16 where the run's own GPU computes it natively (bf16_emulated);
    its capability and name are read without a context."""
    if device.type == "cuda":
        if dtype != torch.bfloat16:
            return dtype == torch.float16, f"CUDA autocast has no {dtype}"
        emulated = bf16_emulated(device.type, torch.cuda.get_device_capability(device),
                                 torch.cuda.get_device_name(device))
        return emulated is None, emulated or "works"
    try:
        a = torch.ones(8, 8, device=device)
        with torch.autocast(device_type=device.type, dtype=dtype):
            out = a @ a
        return out.dtype == dtype, f"autocast produced {out.dtype}"
    except (RuntimeError, AssertionError) as exc:
        return False, first_line(exc)


def compile_works(device: torch.device, timeout_s: float = COMPILE_TIMEOUT_S) -> tuple[bool, str]:
    """Compile and run a tiny function in a child process, so a broken toolchain cannot hang us."""
    try:
        done = subprocess.run([sys.executable, "-c", _COMPILE_PROBE.format(device=str(device))],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False, f"no result after {timeout_s:.0f} s"
    if done.returncode == 0:
        return True, "works"
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return False, lines[-1][:300] if lines else f"exit status {done.returncode}"


@functools.lru_cache(maxsize=8)
def compile_works_here(device: str) -> tuple[bool, str]:
    """compile_works, probed once per process and device: a broken toolchain is found before a run
    starts (a model-specific compile failure still surfaces on the run's first step)."""
    return compile_works(torch.device(device))


def cuda_graphs_refusal(device_type: str, mode: str, accum_steps: int) -> str | None:
    """What compile may be instead, and why, where `mode` records CUDA graphs (reduce-overhead, max-autotune) on
    CUDA with k > 1: each micro-batch's forward starts a new graph generation, which frees what the previous
    backward's graphs output, the .grad being accumulated among them (pytorch #169545); None where it can run."""
    if device_type != "cuda" or mode == "off" or accum_steps <= 1:
        return None
    from torch._inductor import list_mode_options  # noqa: PLC0415 - 2 s to import: only where it can matter

    if not list_mode_options(mode).get("triton.cudagraphs", False):
        return None
    return (f"off or default with accum_steps = {accum_steps} on CUDA: {mode} records CUDA graphs, and each "
            "micro-batch's forward overwrites what the previous backward's graphs left, the .grad being "
            f"accumulated (pytorch #169545); {mode} runs with accum_steps = 1")


def option_unavailable(device: torch.device, amp: str = "off", compile: str = "off") -> str | None:
    """Why this device cannot run these amp and compile settings, or None when it can."""
    if amp != "off":
        works, why = autocast_works(device, DTYPES[amp])
        if not works:
            return f"{amp} autocast does not work on {device}: {why}"
    if compile != "off":
        works, why = compile_works_here(str(device))
        if not works:
            return f"torch.compile does not work on {device}: {why}"
    return None


def max_processes(device: torch.device) -> int:
    """Data-parallel processes this machine can run: one per GPU, or one per CPU core (for trying it out)."""
    if device.type == "cuda":
        return gpu_count()
    return os.cpu_count() or 1


def processes_note(device_setting: str) -> str:
    """What N may be for this device setting, in one line: 'N: 1 to 2, one process per CPU core (for trying
    it out), DDP or FSDP through torchrun' (the CPU's when the setting names no device that exists)."""
    try:
        device = resolve_device(device_setting)
    except ConfigError:
        device = torch.device("cpu")
    unit = "GPU" if gpu_count() else "CPU core (for trying it out)"
    return f"N: 1 to {max_processes(device)}, one process per {unit}, DDP or FSDP through torchrun"
