"""The runs table: settings and final figures per run, damaged and interrupted runs, combined CSV."""

import io

import pandas as pd

from gaccum_core.runs.catalog import run_table, settings_table
from gaccum_core.runs.labels import created_text, run_label, run_labels
from gaccum_core.runs.run_data import combined_csv
from gaccum_core.config import RunConfig
from gaccum_core.train.metrics import STEP_COLUMNS
from gaccum_core.execution.runner import Runner

TINY = dict(device="cpu", model="mlp", micro_batch_size=16, accum_steps=2, max_steps=3)


def test_table_lists_finished_damaged_and_interrupted_runs(tmp_path):
    runner = Runner(tmp_path)
    done = runner.submit(RunConfig(**TINY))
    runner.wait(done, timeout=60)
    damaged = runner.submit(RunConfig(**TINY))
    runner.wait(damaged, timeout=60)
    (tmp_path / damaged / "config.json").write_text('{"micro_batch_size": -1}')
    ghost = runner.store.create(RunConfig(**TINY))
    runner.store.update_status(ghost, state="running")  # as left by a killed server
    table = run_table(runner.store).set_index("run_id")
    assert table.loc[done, "state"] == "finished" and table.loc[done, "steps"] == 3
    assert table.loc[done, "skipped"] == 0 and 0 < table.loc[done, "test_accuracy"] <= 1
    assert table.loc[damaged, "state"] == "damaged" and "micro_batch_size" in table.loc[damaged, "message"]
    assert table.loc[ghost, "state"] == "interrupted"
    assert run_table(runner.store, live=[ghost]).set_index("run_id").loc[ghost, "state"] == "running"


def test_combined_csv_carries_run_ids_and_settings(tmp_path):
    runner = Runner(tmp_path)
    a = runner.submit(RunConfig(**TINY))
    b = runner.submit(RunConfig(**{**TINY, "accum_steps": 4, "amp": "bf16"}))
    runner.wait(a, timeout=60), runner.wait(b, timeout=60)
    frame = pd.read_csv(io.StringIO(combined_csv(runner.store, [a, b])))
    assert list(frame.columns[:3]) == ["run_id", "config_model", "config_dataset"]
    assert set(STEP_COLUMNS) <= set(frame.columns)
    assert frame.columns.is_unique  # the setting lr is config_lr, the scheduled lr per step is lr
    assert frame.groupby("run_id")["config_accum_steps"].first().to_dict() == {a: 2, b: 4}
    assert len(frame) == 6
    evals = pd.read_csv(io.StringIO(combined_csv(runner.store, [a, b], "evals")))
    assert set(evals["run_id"]) == {a, b} and evals["test_accuracy"].between(0, 1).all()


def test_labels_name_every_setting_in_which_the_runs_differ():
    base = RunConfig(model="cnn", micro_batch_size=8, accum_steps=4)
    labels = run_labels([base, base.replace(lr=0.01, dataset="fake", device="cpu"), base.replace(amp="bf16")])
    # In RunConfig's field order; device is where a run ran, not what it trained; the precision is named
    # whenever amp is on, in the words every label uses (bf16, not amp=bf16), and fp32 beside it.
    assert labels == ["cnn b=8 k=4 fp32 dataset=digits lr=0.05", "cnn b=8 k=4 fp32 dataset=fake lr=0.01",
                      "cnn b=8 k=4 bf16 dataset=digits lr=0.05"]
    assert run_labels([base, base]) == ["cnn b=8 k=4"] * 2


def test_settings_table_marks_the_differing_settings():
    table, differing = settings_table({"a": RunConfig(), "b": RunConfig(lr=0.1, epochs=3)})
    assert list(table.columns) == ["a", "b"] and table.loc["lr", "b"] == 0.1
    assert sorted(differing) == ["epochs", "lr"]


def test_run_label_names_what_differs():
    assert run_label(RunConfig(model="cnn", micro_batch_size=8, accum_steps=4, amp="fp16")) == "cnn b=8 k=4 fp16"


def test_labels_name_your_own_models_by_the_end_of_their_path_and_gpt_by_its_size():
    hf = RunConfig(model="hf:/home/me/models/tiny-llama/", dataset="pydoc", micro_batch_size=2, accum_steps=4)
    factory = RunConfig(model="/home/me/code/my_models.py:build", micro_batch_size=2, accum_steps=4)
    gpt = RunConfig(model="gpt", dataset="pydoc", gpt_preset="mini", micro_batch_size=2, accum_steps=4)
    assert [run_label(c) for c in (hf, factory, gpt)] == [
        "hf:tiny-llama b=2 k=4", "my_models.py:build b=2 k=4", "gpt-mini b=2 k=4"]
    assert run_labels([hf, factory])[0].startswith("hf:tiny-llama b=2 k=4 ")


def test_the_table_and_labels_name_the_processes_of_a_data_parallel_run(tmp_path):
    """A 2-process run: world_size 2 and effective batch N·b·k in the table, 'N=2' in its label."""
    from gaccum_core.runs.store import RunStore

    store = RunStore(tmp_path)
    single = store.create(RunConfig(**TINY))
    double = store.create(RunConfig(**{**TINY, "nproc": 2}))
    table = run_table(store, live=[single, double]).set_index("run_id")
    assert table.loc[single, "world_size"] == 1 and table.loc[single, "effective_batch"] == 32
    assert table.loc[double, "world_size"] == 2 and table.loc[double, "effective_batch"] == 64
    assert run_label(RunConfig(**{**TINY, "nproc": 2})).endswith("N=2")
    assert "N=" not in run_label(RunConfig(**TINY))
    assert run_labels([RunConfig(**TINY), RunConfig(**{**TINY, "nproc": 2})])[1].endswith(" N=2")


def test_runs_are_named_by_their_name_or_what_tells_them_apart_never_by_the_end_of_their_id():
    fp16, bf16 = (RunConfig(model="cnn", micro_batch_size=8, accum_steps=4, amp=amp) for amp in ("fp16", "bf16"))
    ids = ["20250101-120000-a1b2c3-fp16-try-1", "20250101-120005-d4e5f6-bf16-try-1"]
    labels = run_labels([fp16, bf16], ["fp16 try 1", "bf16 try 1"], ids)
    assert labels == ["cnn b=8 k=4 fp16 · fp16 try 1", "cnn b=8 k=4 bf16 · bf16 try 1"]
    # The same settings and no name: told apart by when they were created, never by "-try-1" or "a1b2c3".
    same = run_labels([fp16, fp16], ["", ""], ids)
    assert len(set(same)) == 2 and all(s.startswith("cnn b=8 k=4 fp16 · run of ") for s in same)
    assert not any(run_id[-6:] in label for label in same + labels for run_id in ids)
    twins = run_labels([fp16, fp16], ["", ""], ["20250101-120000-a1b2c3", "20250101-120000-d4e5f6"])
    assert twins[0] != twins[1]  # created in the same second
    assert created_text("not-a-time") == "not-a-time"


def test_one_vocabulary_in_every_label():
    gpt = RunConfig(model="gpt", dataset="pydoc", micro_batch_size=2, accum_steps=4, amp="fp16", clear_cache="step")
    assert run_label(gpt) == "gpt-tiny b=2 k=4 fp16 clear_cache=step"
    # Compared with a run that differs only in amp and clear_cache, the words are the same ones.
    plain = gpt.replace(amp="off", clear_cache="off")
    assert run_labels([gpt, plain]) == ["gpt-tiny b=2 k=4 fp16 clear_cache=step", "gpt-tiny b=2 k=4 fp32"]
    assert run_labels([gpt, gpt.replace(gpt_preset="mini")])[1].startswith("gpt-mini b=2 k=4 fp16")


def test_labels_name_the_sharding_and_its_sync_not_the_field_names():
    ddp = RunConfig(model="mlp", nproc=2)
    every, last = ddp.replace(sharding="fsdp"), ddp.replace(sharding="fsdp", fsdp_sync="last")
    kept = last.replace(fsdp_reshard_after_backward="off")
    assert run_labels([ddp, every, last, kept]) == ["mlp b=32 k=4 N=2 ddp", "mlp b=32 k=4 N=2 fsdp/every",
                                                    "mlp b=32 k=4 N=2 fsdp/last",
                                                    "mlp b=32 k=4 N=2 fsdp/last reshard off"]
    assert run_labels([ddp, ddp.replace(seed=1)]) == ["mlp b=32 k=4 N=2 seed=0", "mlp b=32 k=4 N=2 seed=1"]
    assert run_label(last) == "mlp b=32 k=4 N=2 fsdp/last"  # named whenever not the default


def test_a_folder_a_run_trains_on_tells_runs_apart_and_the_cache_folder_never_does():
    a = RunConfig(model="gpt", dataset="tokens", data_dir="corpus_a", max_seq_len=16)
    b = a.replace(data_dir="corpus_b", cache_dir="elsewhere")
    assert run_labels([a, b]) == ["gpt-tiny b=32 k=4 data_dir=corpus_a", "gpt-tiny b=32 k=4 data_dir=corpus_b"]
    digits = RunConfig(model="cnn")  # data_dir is only where mnist would be kept: not named
    assert run_labels([digits, digits.replace(data_dir="elsewhere", lr=0.01)])[1] == "cnn b=32 k=4 lr=0.01"
