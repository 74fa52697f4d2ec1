"""The device line from nvidia-smi's answers, captured in its format (index, uuid, memory.free, memory.total in MiB,
name): every GPU CUDA numbers, CUDA_VISIBLE_DEVICES honoured, unreadable fields and failures said in words."""

import subprocess

import pytest

from gaccum_core.train import gpus as g

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
UUID0 = "GPU-5f2a3c1e-8d4b-7a60-2c19-0e4b1d9a7f31"
UUID1 = "GPU-8b1e44d2-93c7-1f05-6ad2-c37e90b25e48"
ONE_GPU = f"0, {UUID0}, 81004, 81559, {H100}\n"
TWO_GPUS = ONE_GPU + f"1, {UUID1}, 40211, 81559, {H100}\n"


def _gib(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB"


def _answer(stdout: str = "", returncode: int = 0, stderr: str = "", raises: BaseException | None = None):
    """A stand-in for subprocess.run that gives nvidia-smi's answer, and records what it was asked."""
    asked = []

    def run(command, **kwargs):
        asked.append((command, kwargs))
        if raises is not None:
            raise raises
        return subprocess.CompletedProcess(command, returncode, stdout, stderr)

    run.asked = asked
    return run


def _lines(stdout: str, cuda_count: int, runs=None, env=None, **answer) -> list[str]:
    facts = g.look(cuda_count, env=env or {}, run=_answer(stdout, **answer))
    return g.describe_devices(facts, runs or {})


def test_one_gpu_its_name_and_free_memory():
    assert _lines(ONE_GPU, 1) == [f"cuda:0 · {H100} · {_gib(81004)} free of {_gib(81559)} · no run"]


def test_two_gpus_each_on_its_line_with_the_run_using_it():
    lines = _lines(TWO_GPUS, 2, runs={"cuda:1": "fp16 try"})
    assert lines == [f"cuda:0 · {H100} · {_gib(81004)} free of {_gib(81559)} · no run",
                     f"cuda:1 · {H100} · {_gib(40211)} free of {_gib(81559)} · running fp16 try"]


@pytest.mark.parametrize("spec", ["1", f"{UUID1[:12]}", " 1 "])
def test_cuda_visible_devices_1_is_the_second_gpu_numbered_cuda0(spec):
    lines = _lines(TWO_GPUS, 1, runs={"cuda:0": "mine"}, env={"CUDA_VISIBLE_DEVICES": spec})
    assert lines == [f"cuda:0 · {H100} · {_gib(40211)} free of {_gib(81559)} · running mine"]


def test_cuda_visible_devices_read_as_cuda_reads_it():
    two = g.parse_smi(TWO_GPUS)[0]

    def indices(spec):
        return [x.smi_index for x in g.visible_gpus(two, spec)]

    assert indices(None) == [0, 1]
    assert indices("1,0") == [1, 0]  # its order, not nvidia-smi's
    assert indices("1,7,0") == [1]  # up to the first it cannot find
    assert indices("0,-1,1") == [0]
    assert indices(f"{UUID1},{UUID0[:8]}") == [1, 0]
    assert indices(f"{UUID1},0") == [1]  # UUIDs or indices, not both
    assert indices("0,0") == []  # a GPU named twice hides them all
    assert indices("GPU-") == []  # a UUID prefix both share names neither
    assert indices("") == []


def test_a_field_nvidia_smi_cannot_read_and_a_line_it_printed_instead_of_a_gpu():
    answer = (f"0, {UUID0}, [N/A], [N/A], {H100}\n"
              "Unable to determine the device handle for GPU0000:41:00.0: Unknown Error\n"
              f"2, {UUID1}, [Unknown Error], 81559, {H100}\n")
    assert _lines(answer, 3) == [
        f"cuda:0 · {H100} · memory not reported · no run",
        "cuda:1 · name and memory not known · no run",  # the GPU nvidia-smi could not read keeps its number
        f"cuda:2 · {H100} · memory not reported · no run",
        "GPU details: nvidia-smi: Unable to determine the device handle for GPU0000:41:00.0: Unknown Error"]


def test_nvidia_smi_missing_timing_out_or_failing_is_said_under_the_gpus():
    cases = {"nvidia-smi not found": {"raises": FileNotFoundError(2, "No such file")},
             f"nvidia-smi gave no answer in {g.SMI_TIMEOUT_S:.0f} s":
                 {"raises": subprocess.TimeoutExpired("nvidia-smi", g.SMI_TIMEOUT_S)},
             "nvidia-smi failed: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.":
                 {"returncode": 9, "stdout": "NVIDIA-SMI has failed because it couldn't communicate with the "
                                             "NVIDIA driver.\n"},
             "nvidia-smi failed: exit status 4": {"returncode": 4}}
    for why, answer in cases.items():
        answer.setdefault("stdout", "")
        assert _lines(cuda_count=2, **answer) == ["cuda:0 · name and memory not known · no run",
                                                  "cuda:1 · name and memory not known · no run",
                                                  f"GPU details: {why}"], why


def test_the_query_is_bounded_and_not_made_without_cuda():
    run = _answer(ONE_GPU)
    g.look(1, env={}, run=run)
    (command, options), = run.asked
    assert command[0] == "nvidia-smi" and options["timeout"] == g.SMI_TIMEOUT_S
    unasked = _answer(raises=AssertionError("nvidia-smi asked where torch sees no CUDA device"))
    facts = g.look(0, env={}, run=unasked)
    assert facts.gpus == () and unasked.asked == []


def test_the_cpu_line_says_its_cores_ram_and_run(monkeypatch):
    monkeypatch.setattr(g.os, "cpu_count", lambda: 1)
    facts = g.DeviceFacts((), "", 0, None, "", *g.cpu_facts())
    assert facts.cores == 1 and 0 < facts.ram[0] <= facts.ram[1]
    line, = g.describe_devices(facts, {"cpu": "baseline"})
    free, total = facts.ram
    assert line == f"{g.CPU_LINE} · 1 core · {free / 2**30:.1f} GiB RAM free of {total / 2**30:.1f} GiB · running baseline"
    no_psutil = g.DeviceFacts((), "", 0, None, "", 4, None)
    assert g.describe_devices(no_psutil, {}) == [f"{g.CPU_LINE} · 4 cores"]


def test_gpus_of_different_models_say_how_cuda_may_number_them():
    mixed = f"0, {UUID0}, 81004, 81559, {H100}\n1, {UUID1}, 40000, 40960, {A100}\n"
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in _lines(mixed, 2)[-1]
    assert len(_lines(mixed, 2, env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})) == 2
    assert len(_lines(TWO_GPUS, 2)) == 2  # one model: both orders agree


def test_a_mig_instance_nvidia_smi_does_not_list_is_said():
    lines = _lines(TWO_GPUS, 1, env={"CUDA_VISIBLE_DEVICES": "MIG-4f1e2a90-77c1-5b1e-9d7f-0a3b5c6d7e8f"})
    assert lines == ["cuda:0 · name and memory not known · no run",
                     "GPU details: nvidia-smi lists no GPU for CUDA_VISIBLE_DEVICES="
                     "MIG-4f1e2a90-77c1-5b1e-9d7f-0a3b5c6d7e8f"]
