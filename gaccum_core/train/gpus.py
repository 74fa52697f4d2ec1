"""The device line: every GPU this process can train on (name, free and total memory, the run using it), or the CPU.

The GPUs are read with `nvidia-smi` (NVML in a child process): asking creates no CUDA context here, where
torch.cuda.mem_get_info or get_device_name would hold one on the GPU for the server's life. nvidia-smi lists
every GPU of the machine in PCI order; CUDA_VISIBLE_DEVICES picks and orders the ones CUDA numbers cuda:0,
cuda:1, … (read as CUDA reads it, the rules torch.cuda._parse_visible_devices follows). Imports no torch: the
caller passes in how many CUDA devices torch sees.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from gaccum_core.words import plural

SMI_COMMAND = ("nvidia-smi", "--query-gpu=index,uuid,memory.free,memory.total,name",
               "--format=csv,noheader,nounits")
SMI_TIMEOUT_S = 5.0
MIB = 2**20
GIB = 2**30
CPU_LINE = "CPU — runs train on the CPU"
_ORDINAL = re.compile(r"\+?(\d+)")


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it: its index there, UUID, name, free and total bytes (None: not reported)."""

    smi_index: int
    uuid: str
    name: str
    free: int | None
    total: int | None


@dataclass(frozen=True)
class DeviceFacts:
    """What one look at the machine found: the GPUs nvidia-smi listed (or why none), torch's CUDA count, the CPU."""

    gpus: tuple[Gpu, ...]
    smi_problem: str  # '' when nvidia-smi answered; else why its list is missing or partial
    cuda_count: int
    visible_spec: str | None  # CUDA_VISIBLE_DEVICES as the server has it (None: unset)
    order: str  # CUDA_DEVICE_ORDER ('' when unset: CUDA's default, fastest first)
    cores: int
    ram: tuple[int, int] | None  # (available, total) bytes; None where psutil is missing


def _mib(field: str) -> int | None:
    """A memory field in MiB as bytes; None for '[N/A]', '[Not Supported]', '[Unknown Error]' and the like."""
    return int(field) * MIB if field.isdigit() else None


def parse_smi(text: str) -> tuple[list[Gpu], str]:
    """nvidia-smi's CSV answer to SMI_COMMAND as GPUs, and its lines that are not a GPU's (an error it printed)."""
    gpus, other = [], []
    for line in filter(None, map(str.strip, text.splitlines())):
        fields = [f.strip() for f in line.split(",", 4)]
        if len(fields) == 5 and fields[0].isdigit():
            gpus.append(Gpu(int(fields[0]), fields[1], fields[4], _mib(fields[2]), _mib(fields[3])))
        else:
            other.append(line)
    return gpus, "; ".join(other)


def visible_gpus(gpus: Sequence[Gpu], spec: str | None) -> list[Gpu | None]:
    """The GPUs CUDA numbers cuda:0, cuda:1, … under CUDA_VISIBLE_DEVICES=spec (all when unset): by index or UUID
    prefix, up to the first entry that names none (one named twice hides them all). None: one nvidia-smi skipped."""
    by_index = {gpu.smi_index: gpu for gpu in gpus}
    last = max(by_index, default=-1)
    if spec is None:
        return [by_index.get(i) for i in range(last + 1)]
    by_uuid = spec.strip().startswith("GPU-")
    chosen: list[int] = []
    for entry in (e.strip() for e in spec.split(",")):
        if by_uuid:
            matches = [gpu.smi_index for gpu in gpus if entry.startswith("GPU-") and gpu.uuid.startswith(entry)]
            index = matches[0] if len(matches) == 1 else None
        else:
            ordinal = _ORDINAL.match(entry)
            index = int(ordinal.group(1)) if ordinal and int(ordinal.group(1)) <= last else None
        if index is None:
            break
        if index in chosen:
            return []
        chosen.append(index)
    return [by_index.get(i) for i in chosen]


def query_smi(run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
              timeout_s: float = SMI_TIMEOUT_S) -> tuple[list[Gpu], str]:
    """Ask nvidia-smi for every GPU: the GPUs, and '' or why the list is missing or partial, in a few words."""
    try:
        done = run(list(SMI_COMMAND), capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        return [], "nvidia-smi not found"
    except subprocess.TimeoutExpired:
        return [], f"nvidia-smi gave no answer in {timeout_s:.0f} s"
    except OSError as exc:
        return [], f"nvidia-smi could not start: {exc.strerror or exc}"
    gpus, other = parse_smi(done.stdout)
    if done.returncode != 0 and not gpus:
        why = other or next(iter((done.stderr or "").strip().splitlines()), f"exit status {done.returncode}")
        return [], f"nvidia-smi failed: {why}"
    return gpus, other and f"nvidia-smi: {other}"


def cpu_facts() -> tuple[int, tuple[int, int] | None]:
    """The CPU's cores (as os.cpu_count counts them) and (available, total) RAM; None without psutil."""
    try:
        import psutil  # noqa: PLC0415 - the CPU's only: a GPU image may not carry it
    except ImportError:
        return os.cpu_count() or 1, None
    memory = psutil.virtual_memory()
    return os.cpu_count() or 1, (memory.available, memory.total)


def look(cuda_count: int, env: Mapping[str, str] = os.environ,
         run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> DeviceFacts:
    """One look at the machine: nvidia-smi's GPUs (asked only where torch sees CUDA devices) and the CPU."""
    gpus, problem = query_smi(run) if cuda_count else ([], "")
    return DeviceFacts(tuple(gpus), problem, cuda_count, env.get("CUDA_VISIBLE_DEVICES"),
                       env.get("CUDA_DEVICE_ORDER", ""), *cpu_facts())


def _gib(free: int | None, total: int | None, what: str = "") -> str:
    if free is None or total is None:
        return f"{what}memory not reported"
    return f"{free / GIB:.1f} GiB {what}free of {total / GIB:.1f} GiB"


def _gpu_line(index: int, gpu: Gpu | None, runs: Mapping[str, str]) -> str:
    device = f"cuda:{index}"
    what = f"{gpu.name} · {_gib(gpu.free, gpu.total)}" if gpu else "name and memory not known"
    using = f"running {runs[device]}" if device in runs else "no run"
    return f"{device} · {what} · {using}"


def describe_devices(facts: DeviceFacts, runs: Mapping[str, str]) -> list[str]:
    """The device line, one line per GPU CUDA numbers (its run from runs: device -> run label), or the CPU's."""
    if not facts.cuda_count:
        ram = f" · {_gib(*facts.ram, 'RAM ')}" if facts.ram else ""
        using = f" · running {runs['cpu']}" if "cpu" in runs else ""
        return [f"{CPU_LINE} · {plural(facts.cores, 'core')}{ram}{using}"]
    gpus = visible_gpus(facts.gpus, facts.visible_spec) if facts.gpus else []
    lines = [_gpu_line(i, gpus[i] if i < len(gpus) else None, runs) for i in range(facts.cuda_count)]
    if facts.smi_problem:
        lines.append(f"GPU details: {facts.smi_problem}")
    elif len(gpus) < facts.cuda_count:  # a MIG instance, or a GPU nvidia-smi could not read
        lines.append(f"GPU details: nvidia-smi lists no GPU for CUDA_VISIBLE_DEVICES={facts.visible_spec}")
    if len({gpu.name for gpu in gpus if gpu}) > 1 and facts.order != "PCI_BUS_ID":
        lines.append("Numbered as nvidia-smi numbers them; CUDA may number GPUs of different models otherwise "
                     "(set CUDA_DEVICE_ORDER=PCI_BUS_ID for the two to agree)")
    return lines
