"""hf:DIR: a Hugging Face causal LM saved on disk with its tokenizer, trained by the engine on the one
accumulation contract: loss from the logits, summed cross-entropy over target tokens, padding masked."""

import json

import pytest
import torch

from gaccum_core.cli.main import main
from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.data.load import load_data
from gaccum_core.data.text import tokenise_corpus
from gaccum_core.models.build import build_seeded_model
from gaccum_core.train.checks import preflight
from hfmodels import VOCAB, copy_model, saved_model
from training import trained

# Paragraphs of 3 to 40 words: chunks of up to 33 tokens, so micro-batches hold different token counts.
PARAGRAPHS = [f"Paragraph {i} says " + " ".join(["accumulate", "the", "gradient", "of", "every", "token"] * 7)[
    : 20 + (37 * i) % 230] for i in range(28)]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return saved_model(tmp_path_factory, "llama")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The paragraphs as a text file and as JSON Lines (field "body")."""
    root = tmp_path_factory.mktemp("corpus")
    (root / "notes.txt").write_text("\n\n".join(PARAGRAPHS), encoding="utf-8")
    (root / "notes.jsonl").write_text("".join(json.dumps({"id": i, "body": p}) + "\n" for i, p in enumerate(PARAGRAPHS)),
                                      encoding="utf-8")
    return root


def lm(directory, text_file, **changes):
    values = dict(model=f"hf:{directory}", dataset="text", text_file=str(text_file), max_seq_len=32, device="cpu",
                  optimizer="sgd", lr=0.05, momentum=0.0, eval_every=10**9, checkpoint_every=0)
    return RunConfig(**{**values, **changes})


def test_documents_are_the_models_tokens_with_eos_between_them_and_padding_masked(llama, corpus):
    from transformers import AutoTokenizer

    data = load_data(lm(llama, corpus / "notes.txt"))
    tokenizer = AutoTokenizer.from_pretrained(llama, local_files_only=True)
    first = tokenizer(PARAGRAPHS[1])["input_ids"] + [tokenizer.eos_token_id]  # paragraph 0 is held out
    x, y = data.train.batch(torch.tensor([0, 1]))  # a long chunk and a short one
    assert data.num_classes == VOCAB and x[0].tolist() + y[0, -1:].tolist() == first[:33]
    short = int(data.train.targets[1])
    assert short < x.shape[1] and (x[1, short:] == -1).all() and (y[1, short:] == -100).all()
    assert (x[1, :short] >= 0).all() and (y[0] != -100).all()
    # The masked padding leaves the short sequence's logits as they are without it.
    model = build_seeded_model(lm(llama, corpus / "notes.txt"), data.input_shape, data.num_classes).eval()
    with torch.no_grad():
        torch.testing.assert_close(model(x)[1, :short], model(x[1:, :short])[0], rtol=0, atol=1e-5)


@pytest.mark.parametrize("optimizer,lr", [("sgd", 0.05), ("adamw", 1e-4)])
def test_an_hf_model_accumulated_equals_one_big_batch_over_an_epoch(llama, corpus, optimizer, lr):
    """(b=2, k=4) against (b=8, k=1) over a whole epoch ending in a partial window. AdamW's m/(sqrt(v)+eps)
    turns rounding near zero gradients into changes near lr, so it runs at a small lr (see test_language)."""
    common = dict(optimizer=optimizer, lr=lr)
    accumulated, rows = trained(lm(llama, corpus / "notes.txt", micro_batch_size=2, accum_steps=4, **common))
    big, big_rows = trained(lm(llama, corpus / "notes.txt", micro_batch_size=8, accum_steps=1, **common))
    train = load_data(lm(llama, corpus / "notes.txt")).train
    assert len(train) % 8 and rows.steps[-1]["samples"] == len(train) % 8  # the partial last window
    assert [r["tokens"] for r in rows.steps] == [r["tokens"] for r in big_rows.steps]
    assert len({r["tokens"] for r in rows.steps}) > 1  # windows hold different token counts
    torch.testing.assert_close(accumulated, big, rtol=0, atol=1e-5)
    textbook, _ = trained(lm(llama, corpus / "notes.txt", micro_batch_size=2, accum_steps=4,
                             reduction="mean_per_micro_batch", **common))
    assert (textbook - big).abs().max() > 100 * max((accumulated - big).abs().max(), 1e-8)


def test_a_gpt2_style_model_loaded_from_config_trains_exactly_too(tmp_path_factory, corpus):
    gpt2 = saved_model(tmp_path_factory, "gpt2", weights=False)
    config = lm(gpt2, corpus / "notes.txt", max_steps=3)
    accumulated, rows = trained(config.replace(micro_batch_size=2, accum_steps=4))
    big, _ = trained(config.replace(micro_batch_size=8, accum_steps=1))
    torch.testing.assert_close(accumulated, big, rtol=0, atol=1e-5)
    assert rows.evals and rows.evals[-1]["sample"].startswith("The")


def test_weights_are_loaded_when_saved_and_drawn_from_the_seed_when_not(tmp_path_factory, llama, corpus):
    from transformers import AutoModelForCausalLM

    text = corpus / "notes.txt"
    loaded = build_seeded_model(lm(llama, text, seed=5), (32,), VOCAB)
    assert loaded.origin == "weights loaded from model.safetensors"
    saved = AutoModelForCausalLM.from_pretrained(llama, local_files_only=True)
    assert all(torch.equal(a, b) for a, b in zip(loaded.model.state_dict().values(), saved.state_dict().values()))
    bare = saved_model(tmp_path_factory, "llama", weights=False)
    one, again, other = (build_seeded_model(lm(bare, text, seed=s), (32,), VOCAB) for s in (0, 0, 1))
    assert one.origin.startswith("initialised from config.json with seed 0")
    params = [torch.cat([p.flatten() for p in m.parameters()]) for m in (one, again, other)]
    assert torch.equal(params[0], params[1]) and not torch.equal(params[0], params[2])
    assert one.training and loaded.training


def test_a_jsonl_corpus_gives_the_text_files_sequences(llama, corpus):
    as_text = load_data(lm(llama, corpus / "notes.txt")).train
    as_jsonl = load_data(lm(llama, corpus / "notes.jsonl", text_field="body")).train
    assert len(as_text) == len(as_jsonl)
    every = torch.arange(len(as_text))
    assert all(torch.equal(a, b) for a, b in zip(as_text.batch(every), as_jsonl.batch(every)))


def test_no_dropout_turns_a_models_dropout_off(tmp_path_factory, corpus):
    noisy = saved_model(tmp_path_factory, "gpt2", weights=False, dropout=0.1)
    config = lm(noisy, corpus / "notes.txt")
    on = build_seeded_model(config, (32,), VOCAB)
    off = build_seeded_model(config.replace(no_dropout=True), (32,), VOCAB)
    assert any(m.p > 0 for m in on.modules() if isinstance(m, torch.nn.Dropout))
    assert all(m.p == 0 for m in off.modules() if isinstance(m, torch.nn.Dropout))
    x = torch.randint(0, VOCAB, (2, 16))
    assert torch.equal(off(x), off(x)) and not torch.equal(on(x), on(x))  # train mode: dropout draws


def _refused(argv, tmp_path, capsys):
    code = main(["run", *argv, "--device", "cpu", "--max-steps", "1", "--runs-dir", str(tmp_path / "runs")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    return err[0]


def test_bad_hf_directories_are_one_line_errors_naming_the_field(tmp_path, llama, corpus, capsys):
    from transformers import ViTConfig

    text = ["--dataset", "text", "--text-file", str(corpus / "notes.txt"), "--micro-batch-size", "2"]
    no_config = copy_model(llama, tmp_path / "no_config")
    (no_config / "config.json").unlink()
    not_causal = copy_model(llama, tmp_path / "vit")
    (not_causal / "config.json").unlink()
    ViTConfig().save_pretrained(not_causal)
    corrupt = copy_model(llama, tmp_path / "corrupt")
    weights = corrupt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # truncated
    no_tokenizer = copy_model(llama, tmp_path / "no_tokenizer")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (no_tokenizer / name).unlink()
    cases = [
        (["--model", f"hf:{tmp_path / 'missing'}"], "--model", "no such directory"),
        (["--model", f"hf:{no_config}"], "--model", "config.json"),
        (["--model", f"hf:{not_causal}"], "--model", "a causal language model"),
        (["--model", f"hf:{corrupt}"], "--model", "model.safetensors does not"),
        (["--model", f"hf:{no_tokenizer}"], "--model", "tokenizer"),
        (["--model", f"hf:{llama}", "--max-seq-len", "200"], "--max-seq-len", "from 1 to 128"),
        (["--model", f"hf:{llama}", "--dataset", "digits"], "--dataset", "a text data set"),
    ]
    for argv, flag, words in cases:
        line = _refused([*text, *argv] if argv[-2] != "--dataset" else argv, tmp_path, capsys)
        assert line.startswith(f"gaccum: error: {flag}=") and words in line, line


def test_bad_jsonl_lines_name_the_line_and_the_field(tmp_path, llama, capsys):
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "one document here"}\n{"text": "two\n', encoding="utf-8")
    other = tmp_path / "other.jsonl"
    other.write_text('{"text": "one document here"}\n{"body": "two documents"}\n', encoding="utf-8")
    line = _refused(["--model", f"hf:{llama}", "--dataset", "text", "--text-file", str(broken)], tmp_path, capsys)
    assert line.startswith("gaccum: error: --text-file=") and "line 2 is not JSON" in line, line
    line = _refused(["--model", f"hf:{llama}", "--dataset", "text", "--text-file", str(other)], tmp_path, capsys)
    assert line.startswith("gaccum: error: --text-field='text'") and "line 2" in line and "'body'" in line, line


def test_preflight_checks_an_hf_run_without_loading_its_weights(llama, corpus, monkeypatch):
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained",
                        lambda *a, **k: pytest.fail("preflight loaded the weights"))
    preflight(lm(llama, corpus / "notes.txt"))
    # The sequences a corpus holds are known once it is tokenised (preflight never tokenises one): then a
    # micro-batch larger than the training set is refused before the run.
    tokenise_corpus(lm(llama, corpus / "notes.txt"))
    with pytest.raises(ConfigError) as caught:
        preflight(lm(llama, corpus / "notes.txt", micro_batch_size=10_000))
    assert caught.value.field == "micro_batch_size"


@pytest.mark.parametrize("amp", ["fp16", "bf16"])
def test_an_hf_model_trains_under_autocast_with_its_loss_in_fp32(llama, corpus, amp):
    """Autocast on the CPU (fp16 with a GradScaler), with clipping: finite losses, the scale in the rows."""
    _, rows = trained(lm(llama, corpus / "notes.txt", micro_batch_size=2, accum_steps=2, amp=amp, grad_clip=1.0,
                         max_steps=3))
    assert len(rows.steps) == 3 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows.steps)
    assert (rows.steps[0]["scale"] is not None) == (amp == "fp16")


def _retensor(directory, name, **changes):
    """The directory's model.safetensors rewritten: tensors replaced (a tensor) or removed (None) by name."""
    from safetensors.torch import load_file, save_file

    tensors = {**load_file(directory / name), **changes}
    save_file({k: v for k, v in tensors.items() if v is not None}, directory / name, metadata={"format": "pt"})


def _as_bin(directory):
    """The directory's weights moved from model.safetensors to pytorch_model.bin (torch.save's zip)."""
    from safetensors.torch import load_file

    torch.save(load_file(directory / "model.safetensors"), directory / "pytorch_model.bin")
    (directory / "model.safetensors").unlink()


def _sharded(directory):
    """The directory's weights in two safetensors shards and the index that names them; the shards' names."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    names = sorted(tensors)
    shards = {f"model-0000{n}-of-00002.safetensors": names[n - 1::2] for n in (1, 2)}
    for shard, held in shards.items():
        save_file({k: tensors[k] for k in held}, directory / shard, metadata={"format": "pt"})
    (directory / "model.safetensors").unlink()
    index = {"metadata": {}, "weight_map": {k: shard for shard, held in shards.items() for k in held}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    return sorted(shards)


def _cut(path, keep):
    path.write_bytes(path.read_bytes()[:keep])


UP = "model.layers.0.mlp.up_proj.weight"  # (64, 32) in the tiny Llama
DAMAGE = {  # what breaks the directory's weights -> the words of the one-line refusal
    "wrong-shape": (lambda d: _retensor(d, "model.safetensors", **{UP: torch.zeros(128, 32)}),
                    f"model.safetensors holds {UP} of shape (128, 32), the model's is (64, 32)"),
    "missing-tensor": (lambda d: _retensor(d, "model.safetensors", **{UP: None}),
                       f"the model's {UP} is not in model.safetensors"),
    "other-names": (lambda d: _retensor(d, "model.safetensors", **{"model.blocks.0.mlp.up_proj.weight":
                                                                   torch.zeros(64, 32), UP: None}),
                    f"the model's {UP} is not in model.safetensors, whose model.blocks.0.mlp.up_proj.weight has no "
                    "place in the model"),
    "bin-truncated": (lambda d: (_as_bin(d), _cut(d / "pytorch_model.bin", 40_000)),
                      "pytorch_model.bin does not open: it has no zip directory"),
    "bin-not-a-zip": (lambda d: (_as_bin(d), (d / "pytorch_model.bin").write_bytes(b"not weights\n" * 100)),
                      "pytorch_model.bin does not open: it has no zip directory"),
    "bin-wrong-shape": (lambda d: (_retensor(d, "model.safetensors", **{UP: torch.zeros(128, 32)}), _as_bin(d)),
                        f"pytorch_model.bin holds {UP} of shape (128, 32), the model's is (64, 32)"),
    "index-not-json": (lambda d: (_sharded(d), (d / "model.safetensors.index.json").write_text("{weight_map")),
                       "model.safetensors.index.json is not JSON"),
    "shard-missing": (lambda d: (d / _sharded(d)[1]).unlink(),
                      "model.safetensors.index.json names the shard model-00002-of-00002.safetensors, which is not "
                      "in the directory"),
    "shard-damaged": (lambda d: _cut(d / _sharded(d)[1], 100),
                      "model-00002-of-00002.safetensors (a shard model.safetensors.index.json names) does not open"),
    "shard-wrong-shape": (lambda d: _retensor(d, _sharded(d)[1], **{UP: torch.zeros(128, 32)}),
                          f"model-00002-of-00002.safetensors holds {UP} of shape (128, 32), the model's is (64, 32)"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_weights_that_would_not_load_are_refused_in_one_line_before_any_run_directory(tmp_path, llama, corpus,
                                                                                      capsys, damage):
    """Checked from the files' headers before the run directory exists: from_pretrained would raise on each
    of these in the run (or, for a tensor the files lack, draw it at random without a word)."""
    directory = copy_model(llama, tmp_path / damage)
    breaks, words = DAMAGE[damage]
    breaks(directory)
    line = _refused(["--model", f"hf:{directory}", "--dataset", "text", "--text-file", str(corpus / "notes.txt"),
                     "--micro-batch-size", "2"], tmp_path, capsys)
    assert line.startswith("gaccum: error: --model=") and words in line, line


def test_weights_from_pretrained_accepts_pass_the_check(tmp_path, tmp_path_factory, llama, corpus):
    """What from_pretrained tolerates is not refused: a GPT-2 whose lm_head is tied to its embedding (not in
    the file), names without the base model's prefix, tensors the model has no place for, other dtypes,
    PyTorch's format and shards."""
    no_prefix = copy_model(llama, tmp_path / "no_prefix")
    _retensor(no_prefix, "model.safetensors", **{k: None for k in _names(llama) if k.startswith("model.")},
              **{k.removeprefix("model."): t for k, t in _tensors(llama).items() if k.startswith("model.")})
    extra = copy_model(llama, tmp_path / "extra")
    embedding = _tensors(llama)["model.embed_tokens.weight"].half()
    _retensor(extra, "model.safetensors", **{"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8),
                                             "model.embed_tokens.weight": embedding})
    as_bin, sharded = copy_model(llama, tmp_path / "bin"), copy_model(llama, tmp_path / "sharded")
    _as_bin(as_bin)
    _sharded(sharded)
    gpt2 = saved_model(tmp_path_factory, "gpt2")
    assert "lm_head.weight" not in _names(gpt2)
    for directory in (no_prefix, extra, as_bin, sharded, gpt2):
        preflight(lm(directory, corpus / "notes.txt"))


def _tensors(directory):
    from safetensors.torch import load_file

    return load_file(directory / "model.safetensors")


def _names(directory):
    return set(_tensors(directory))
