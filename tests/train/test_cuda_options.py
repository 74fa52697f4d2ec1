"""CUDA-only decisions, taken on the CPU with the device's facts passed in (issue 41, items 1 and 8): compile modes
that record CUDA graphs refused with k > 1 (preflight, the CLI, a sweep, the engine), torch's error for them turned
into the compile message, and bfloat16 refused where the run's own GPU only emulates it (a mixed box)."""

import pytest
import torch
from torch._inductor.cudagraph_trees import CUDAGraphTreeManager

from gaccum_core.cli.main import main
from gaccum_core.config import COMPILE_MODES, ConfigError, RunConfig
from gaccum_core.sweeps.checks import check_sweep
from gaccum_core.sweeps.spec import SweepSpec
from gaccum_core.train import device as dev
from gaccum_core.train import engine as engine_module
from gaccum_core.train.checks import preflight
from gaccum_core.train.engine import Engine
from gaccum_core.train.errors import CompileError
from gaccum_core.train.metrics import RowKeeper

# The modes torch.compile documents as using CUDA graphs ("reduce-overhead": CUDA graphs; "max-autotune": CUDA
# graphs by default, "max-autotune-no-cudagraphs" without): the oracle, not read from torch's mode table.
GRAPH_MODES = {"reduce-overhead", "max-autotune"}
# (name, compute capability) per GPU index: an H100 and a V100 in one box.
MIXED_BOX = {0: ("Fake H100", (9, 0)), 1: ("Fake V100", (7, 0))}


@pytest.fixture
def mixed_box(monkeypatch):
    """A machine with two GPUs, cuda:0 of compute capability 9.0 and cuda:1 of 7.0, the current one settable;
    torch.cuda.is_bf16_supported() answers yes, as torch's does on a V100 (it counts emulation)."""
    current = {"index": 0}

    def index(device=None):
        return current["index"] if device is None else torch.device(device).index

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(MIXED_BOX))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current["index"])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: MIXED_BOX[index(device)][0])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: MIXED_BOX[index(device)][1])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (60 * 2**30, 80 * 2**30))
    monkeypatch.setattr(dev, "compile_works_here", lambda device: (True, "works"))  # no compile probe on a fake GPU
    return current


@pytest.mark.parametrize("mode", COMPILE_MODES)
def test_only_the_cuda_graph_modes_are_refused_and_only_on_cuda_with_k_above_1(mode):
    for device_type in ("cpu", "cuda"):
        for k in (1, 2, 8):
            why = dev.cuda_graphs_refusal(device_type, mode, k)
            assert (why is not None) == (device_type == "cuda" and mode in GRAPH_MODES and k > 1), (device_type, k)
            if why is not None:
                assert why.startswith(f"off or default with accum_steps = {k} on CUDA: {mode} records CUDA graphs")
                assert ".grad" in why and f"{mode} runs with accum_steps = 1" in why


def test_the_cli_refuses_reduce_overhead_with_k_2_on_a_gpu_in_one_line(mixed_box, tmp_path, capsys):
    runs = tmp_path / "runs"
    code = main(["run", "--device", "cuda:1", "--runs-dir", str(runs), "--model", "mlp", "--accum-steps", "2",
                 "--compile", "reduce-overhead"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "--compile='reduce-overhead'" in lines[0] and "off or default with accum_steps = 2" in lines[0]
    assert not runs.exists() or not any(runs.iterdir())


def test_preflight_lets_the_cuda_graph_modes_run_with_k_1_on_a_gpu(mixed_box):
    for mode in GRAPH_MODES:
        preflight(RunConfig(model="mlp", device="cuda:1", micro_batch_size=16, accum_steps=1, compile=mode))


def test_a_sweep_crossing_k_is_refused_at_its_first_cell_with_k_above_1(mixed_box):
    spec = SweepSpec(grid=(("micro_batch_size", (32, 16)),), effective_batch=32,
                     common=(("model", "mlp"), ("device", "cuda:0"), ("compile", "max-autotune")))
    with pytest.raises(ConfigError) as refused:
        check_sweep(spec)
    assert refused.value.field == "compile" and refused.value.value == "max-autotune"
    assert refused.value.allowed.startswith("off or default with accum_steps = 2 on CUDA")


def test_the_engine_refuses_to_compile_a_cuda_graph_mode_with_k_above_1_where_preflight_was_skipped():
    model = torch.nn.Linear(2, 2)
    config = RunConfig(model="mlp", accum_steps=4, compile="reduce-overhead")
    with pytest.raises(ConfigError, match="off or default with accum_steps = 4 on CUDA"):
        engine_module._compiled(model, config, torch.device("cuda", 1))
    assert engine_module._compiled(model, config, torch.device("cpu")) is not model  # compiled on the CPU
    assert engine_module._compiled(model, config.replace(accum_steps=1), torch.device("cuda", 1)) is not model


@pytest.mark.parametrize("grad_output", [True, False])
def test_torchs_cuda_graph_overwrite_error_becomes_the_compile_message(grad_output, monkeypatch):
    """The error torch 2.14 raises when a later graph run reused a .grad's memory (its own text, from its own
    formatter) ends the run as a CompileError saying what to set."""
    said = CUDAGraphTreeManager.format_dealloc_msg("File model.py, line 9", is_grad_output=grad_output)

    def overwritten(*args, **kwargs):
        raise RuntimeError(said)

    engine = Engine(RunConfig(model="mlp", device="cpu", micro_batch_size=16, accum_steps=2, max_steps=1,
                              compile="default"))
    monkeypatch.setattr(engine, "_train_window", overwritten)
    with pytest.raises(CompileError) as failed:
        engine.run(RowKeeper())
    message = str(failed.value)
    assert message.startswith("torch.compile(mode='default') failed on cpu: RuntimeError: Error: accessing")
    assert "\n" not in message and message.endswith("or accum_steps to 1: its CUDA graphs reuse the memory of "
                                                    "the .grad being accumulated (pytorch #169545).")


def test_another_runtime_error_of_a_compiled_run_is_left_as_it_is(monkeypatch):
    def fails(*args, **kwargs):
        raise RuntimeError("a data loader broke")

    engine = Engine(RunConfig(model="mlp", device="cpu", micro_batch_size=16, accum_steps=2, max_steps=1,
                              compile="default"))
    monkeypatch.setattr(engine, "_train_window", fails)
    with pytest.raises(RuntimeError, match="^a data loader broke$"):
        engine.run(RowKeeper())


@pytest.mark.parametrize("capability,refused", [((6, 1), True), ((7, 0), True), ((7, 5), True), ((8, 0), False),
                                                ((8, 6), False), ((9, 0), False), ((12, 0), False)])
def test_bf16_is_refused_below_compute_capability_8(capability, refused):
    why = dev.bf16_emulated("cuda", capability, "Some GPU")
    assert (why is not None) == refused
    if refused:
        assert why.startswith(f"Some GPU has compute capability {capability[0]}.{capability[1]}, below 8.0: "
                              "bfloat16 is only emulated there")
    assert dev.bf16_emulated("cpu", capability, "CPU") is None


def test_on_a_mixed_box_bf16_is_judged_by_the_runs_gpu_not_the_current_one(mixed_box, monkeypatch):
    works, why = dev.autocast_works(torch.device("cuda", 1), torch.bfloat16)  # current: cuda:0, an H100
    assert not works and why.startswith("Fake V100 has compute capability 7.0, below 8.0")

    def probe(*args, **kwargs):
        raise AssertionError("a tensor was made on the GPU: the server would keep a CUDA context")

    monkeypatch.setattr(torch, "ones", probe)
    mixed_box["index"] = 1  # now the current device is the V100: cuda:0 is still judged as the H100 it is
    assert dev.autocast_works(torch.device("cuda", 0), torch.bfloat16) == (True, "works")
    assert dev.autocast_works(torch.device("cuda", 1), torch.float16)[0]  # fp16 autocast on every GPU


def test_the_cli_refuses_bf16_on_a_gpu_below_8_in_one_line(mixed_box, tmp_path, capsys):
    code = main(["run", "--device", "cuda:1", "--runs-dir", str(tmp_path / "runs"), "--model", "mlp", "--amp", "bf16"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "--amp='bf16'" in lines[0] and "Fake V100 has compute capability 7.0" in lines[0] and "fp16" in lines[0]
