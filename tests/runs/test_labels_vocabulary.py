"""Issue 42 item 2: one label vocabulary. Every RunConfig field, run through every place that names a setting (a
run's label in the runs table and status lines, the legends, the Train page's chips, a sweep cell's label, which the
CLI's sweep summary prints, and an imported TensorBoard run's message), is said in the same words; chips name only
what differs among the runs drawn, as the legends do."""

import dataclasses

import pytest

from dashboard.run_picks import run_choice_labels
from gaccum_core.config import ConfigError, RunConfig, applies, by_field
from gaccum_core.runs.labels import run_label, run_labels
from gaccum_core.runs.store import RunStore
from gaccum_core.tensorboard.importing import ImportedRun
from gaccum_core.sweeps.labels import cell_label
from gaccum_core.sweeps.spec import Cell, SweepSpec

IMAGE = RunConfig(model="cnn")
# Runs in which each field applies: the first that takes a field's other value tells it apart.
CONTEXTS = (IMAGE, IMAGE.replace(amp="fp16"), IMAGE.replace(nproc=2), IMAGE.replace(nproc=2, sharding="fsdp"),
            IMAGE.replace(activation_checkpointing="selective"), IMAGE.replace(dataset="fake"),
            IMAGE.replace(dataset="mnist"), IMAGE.replace(model="resnet18"),
            RunConfig(model="gpt", dataset="text", text_file="notes.jsonl"),
            RunConfig(model="gpt", dataset="tokens"), RunConfig(model="gpt", dataset="hf-dataset"),
            RunConfig(model="gpt", dataset="pg"), RunConfig(model="gpt", dataset="pg", loss_agg="seq-mean-token-sum-norm"))
# Another value for the fields whose type alone does not give one.
OTHER = {"model": "mlp", "dataset": "fake", "device": "cpu", "data_dir": "corpus", "text_file": "more.jsonl",
         "text_field": "body", "cache_dir": "cache", "weights_file": "/far/w.pth", "prompt_field": "question",
         "completion_field": "answer", "advantage_field": "adv", "group_field": "prompt_id"}


def _other(field: dataclasses.Field, value):
    if field.name in OTHER:
        return OTHER[field.name]
    if field.metadata["choices"]:
        return next(choice for choice in field.metadata["choices"] if choice != value)
    return {bool: lambda v: not v, int: lambda v: v + 1, float: lambda v: v / 2 or 0.5}[type(value)](value)


def _pair(field: dataclasses.Field) -> tuple[RunConfig, RunConfig]:
    """Two runs the field applies to, apart in it alone."""
    for context in CONTEXTS:
        try:
            other = context.replace(**{field.name: _other(field, getattr(context, field.name))})
        except ConfigError:
            continue
        if applies(context, field.name) and applies(other, field.name):
            return context, other
    raise AssertionError(f"no context in CONTEXTS takes another value of {field.name}: add one")


PAIRS = {f.name: _pair(f) for f in dataclasses.fields(RunConfig)}


def _apart(text: str, beside: str) -> str:
    """The words of `text` that `beside` lacks, in their order: what one place says of the setting in which two
    runs differ."""
    return " ".join(word for word in text.split() if word not in beside.split())


def _both(words) -> tuple[str, str]:
    """What a place says of each run of a pair (its words told apart from the other's)."""
    a, b = words
    return _apart(a, b), _apart(b, a)


def _message(config: RunConfig, name: str) -> str:
    """The words an imported run's message gives its settings, its hparams naming what differs from the defaults."""
    plain = RunConfig()
    settings = {k: v for k, v in config.to_dict().items() if v != getattr(plain, k) or k == name}
    summary = ImportedRun("r", ".", 1, 0, 0, settings).summary()
    return summary.split("hparams: ")[1].split(" (the rest")[0].split(" and ")[0]


def _cell_label(name: str, config: RunConfig) -> str:
    """The label of a sweep's cell that crosses the field alone and holds this run's settings."""
    return cell_label(Cell(0, ((name, getattr(config, name)),), config), SweepSpec(grid=(("seed", (0,)),)))


@pytest.fixture(scope="module")
def chips(tmp_path_factory):
    """Each field's pair of runs on disk, and every other pair beside them: the chips of one pair, picked and
    drawn together, in the Train page's words."""
    store = RunStore(tmp_path_factory.mktemp("runs"))
    ids = {name: [store.create(config) for config in pair] for name, pair in PAIRS.items()}
    # Runs that still read the same (apart in a setting no label names) are told apart by when they were made.
    return {name: [run_choice_labels(store, pair)[run_id].split(" · ")[0] for run_id in pair]
            for name, pair in ids.items()}


def _places(name: str, chips: dict[str, list[str]]) -> dict[str, tuple[str, str]]:
    """What each place says of the field for each run of its pair, apart from the other run."""
    a, b = PAIRS[name]
    places = {"legend": run_labels([a, b]), "chip": chips[name], "sweep cell": [_cell_label(name, c) for c in (a, b)],
              "imported run": [_message(c, name) for c in (a, b)]}
    if by_field("in_label").get(name) in ("always", "usual"):
        places["run's label"] = [run_label(c) for c in (a, b)]
    return {place: _both(words) for place, words in places.items()}


def test_every_field_is_said_in_the_same_words_in_every_place_that_names_it(chips):
    drift = {}
    for name in PAIRS:
        places = _places(name, chips)
        for side in (0, 1):
            said = {place: words[side] for place, words in places.items() if words[side]}
            if len(set(said.values())) > 1:
                drift[f"{name} of run {'ab'[side]}"] = said
    assert not drift, "\n".join(f"{where}: {said}" for where, said in drift.items())


def test_a_field_said_by_another_s_words_is_said_in_them(chips):
    for name in (name for name, said in by_field("in_label").items() if said == "other"):
        legend, cell = _places(name, chips)["legend"], _places(name, chips)["sweep cell"]
        assert any(legend), name  # the legend tells them apart, by another setting's word: gpt-mini, fsdp/last
        assert [cell[side] for side in (0, 1) if legend[side]] == [words for words in legend if words], name


def test_a_cell_crossing_a_setting_and_the_one_that_completes_its_word_says_it_once():
    fsdp = IMAGE.replace(nproc=2, sharding="fsdp", fsdp_sync="last")
    cell = Cell(0, (("sharding", "fsdp"), ("fsdp_sync", "last")), fsdp)
    assert cell_label(cell, SweepSpec(grid=(("seed", (0,)),))) == "fsdp/last"


def test_the_words_that_had_drifted_are_the_legends():
    full = IMAGE.replace(activation_checkpointing="full")
    spec = SweepSpec(grid=(("amp", ("off", "bf16")),))
    assert cell_label(Cell(0, (("activation_checkpointing", "full"),), full), spec) == "ckpt/full"
    assert cell_label(Cell(0, (("amp", "off"),), IMAGE), spec) == "fp32"  # not "off": the cells differ in precision
    # fp16 or bf16, and fp32 only where runs differ in precision (never beside runs all fp32)
    assert run_labels([IMAGE, IMAGE.replace(amp="bf16")]) == ["cnn b=32 k=4 fp32", "cnn b=32 k=4 bf16"]
    assert run_labels([IMAGE, IMAGE.replace(lr=0.5)]) == ["cnn b=32 k=4 lr=0.05", "cnn b=32 k=4 lr=0.5"]
    assert _message(full, "activation_checkpointing") == "cnn ckpt/full"
    assert _message(IMAGE.replace(model="gpt", dataset="pydoc", gpt_preset="mini"), "gpt_preset") == "gpt-mini " \
        "dataset=pydoc"  # once, not 'gpt_preset=mini'


def test_a_chip_names_what_differs_among_the_runs_drawn_not_among_every_run_on_disk(tmp_path):
    store = RunStore(tmp_path)
    text = RunConfig(model="gpt", dataset="pydoc", epochs=30, max_steps=15)
    drawn = [store.create(text), store.create(text.replace(micro_batch_size=8), "ac-off")]
    store.create(IMAGE.replace(epochs=3))  # on disk, not drawn: its dataset, epochs and packing differ
    labels = run_choice_labels(store, drawn)
    assert [labels[r] for r in drawn] == run_labels([text, text.replace(micro_batch_size=8)], ["", "ac-off"])
    assert labels[drawn[1]] == "gpt-tiny b=8 k=4 · ac-off"  # not 'dataset=pydoc epochs=30 max_steps=15 packing=off'


def test_an_aggregation_is_named_by_its_mode_and_token_mean_only_beside_another():
    sft = RunConfig(model="gpt", dataset="sft")
    assert run_labels([sft, sft.replace(loss_agg="seq-mean-token-sum-norm", loss_agg_norm=64)]) == [
        "gpt-tiny b=32 k=4 token-mean", "gpt-tiny b=32 k=4 seq-mean-token-sum-norm/C=64"]
    assert run_labels([sft, sft.replace(lr=0.5)]) == ["gpt-tiny b=32 k=4 lr=0.05", "gpt-tiny b=32 k=4 lr=0.5"]
