"""Issue 33 item 6: a run's label names the settings in which the runs differ only where they apply to that
run: no sharding for one process, no GradScaler settings without fp16, no text settings for an image run."""

from gaccum_core.config import applies
from gaccum_core.config import RunConfig
from gaccum_core.runs.labels import run_labels

IMAGE = RunConfig(model="cnn")  # one process, fp32, digits
FP16 = IMAGE.replace(amp="fp16", init_scale=1024.0, growth_interval=100)
TEXT = RunConfig(model="gpt", dataset="text", text_file="notes.jsonl", text_field="body", max_seq_len=64)
FSDP = IMAGE.replace(nproc=2, sharding="fsdp")


def test_an_fp32_image_run_of_one_process_is_named_without_settings_that_do_not_apply_to_it():
    image, fp16, text, fsdp = run_labels([IMAGE, FP16, TEXT, FSDP])
    # fp32 beside the fp16 run; not ddp, init_scale, growth_interval, text_file, max_seq_len
    assert image == "cnn b=32 k=4 fp32 dataset=digits"
    assert fp16 == "cnn b=32 k=4 fp16 dataset=digits"  # its scale is the only one: nothing to tell apart
    assert text == "gpt-tiny b=32 k=4 fp32 dataset=text"
    assert fsdp == "cnn b=32 k=4 fp32 N=2 fsdp/every dataset=digits"


def test_a_setting_is_named_on_the_runs_it_applies_to_when_they_differ_in_it():
    labels = run_labels([FP16, FP16.replace(init_scale=256.0), IMAGE, TEXT, TEXT.replace(max_seq_len=32)])
    assert labels[:3] == ["cnn b=32 k=4 fp16 dataset=digits init_scale=1024.0",
                          "cnn b=32 k=4 fp16 dataset=digits init_scale=256.0", "cnn b=32 k=4 fp32 dataset=digits"]
    assert labels[3:] == ["gpt-tiny b=32 k=4 fp32 dataset=text max_seq_len=64",
                          "gpt-tiny b=32 k=4 fp32 dataset=text max_seq_len=32"]
    two = IMAGE.replace(nproc=2)
    assert run_labels([two, FSDP, IMAGE]) == ["cnn b=32 k=4 N=2 ddp", "cnn b=32 k=4 N=2 fsdp/every", "cnn b=32 k=4"]


def test_which_settings_apply_to_a_run():
    assert not applies(IMAGE, "init_scale") and applies(FP16, "growth_interval")
    assert not applies(IMAGE, "sharding") and applies(FSDP, "fsdp_sync")
    assert not applies(IMAGE.replace(nproc=2), "fsdp_sync")
    assert not any(applies(IMAGE, n) for n in ("text_file", "text_field", "max_seq_len", "packing", "token_dtype"))
    assert applies(TEXT, "text_field") and not applies(TEXT.replace(text_file="notes.txt"), "text_field")
    assert not applies(TEXT, "image_size") and applies(IMAGE, "image_size")
    assert not applies(IMAGE, "ac_every") and applies(IMAGE.replace(activation_checkpointing="selective"), "ac_every")
    assert not applies(IMAGE.replace(optimizer="adam"), "momentum") and applies(IMAGE, "lr")
