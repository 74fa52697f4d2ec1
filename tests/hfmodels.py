"""Hugging Face causal LMs written by the tests: a tokenizer trained with `tokenizers`, a tiny Llama- or
GPT-2-style model from its config, both saved with save_pretrained, read back through hf:DIR."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import torch

from gaccum_core.data.text import pydoc_documents

VOCAB = 300


@functools.lru_cache(maxsize=1)
def _tokenizer():
    """A byte-level BPE tokenizer of 300 tokens trained on ten pydoc topics, with <eos> and <pad>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<eos>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(pydoc_documents()[:10], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<eos>", pad_token="<pad>")


def _config(kind: str, positions: int, dropout: float):
    from transformers import GPT2Config, LlamaConfig

    tokenizer = _tokenizer()
    ids = dict(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    if kind == "llama":
        return LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=2, max_position_embeddings=positions, attention_dropout=dropout, **ids)
    return GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=positions, attn_pdrop=dropout,
                      resid_pdrop=dropout, embd_pdrop=dropout, **ids)


def save_model(directory: Path, kind: str = "llama", weights: bool = True, positions: int = 128,
               dropout: float = 0.0, seed: int = 1) -> Path:
    """A tiny `kind` (llama or gpt2) causal LM saved in directory with its tokenizer; config.json alone
    (no weights file) when weights is False. Returns the directory."""
    from transformers import AutoModelForCausalLM

    config = _config(kind, positions, dropout)
    directory.mkdir(parents=True, exist_ok=True)
    if weights:
        torch.manual_seed(seed)
        AutoModelForCausalLM.from_config(config).save_pretrained(directory)
    else:
        config.save_pretrained(directory)
    _tokenizer().save_pretrained(directory)
    return directory


@functools.lru_cache(maxsize=None)
def _cached(root: str, kind: str, weights: bool, positions: int, dropout: float) -> Path:
    return save_model(Path(root) / f"{kind}-{'w' if weights else 'c'}-{positions}-{dropout}", kind, weights,
                      positions, dropout)


def saved_model(tmp_path_factory, kind: str = "llama", weights: bool = True, positions: int = 128,
                dropout: float = 0.0) -> Path:
    """save_model once per test process and arguments, in the session's temporary directory."""
    return _cached(str(tmp_path_factory.getbasetemp() / "hf"), kind, weights, positions, dropout)


def copy_model(source: Path, target: Path) -> Path:
    """A copy of a saved model's directory, to break one of its files."""
    shutil.copytree(source, target)
    return target
