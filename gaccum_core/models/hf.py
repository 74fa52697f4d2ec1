"""`hf:DIR`: a Hugging Face causal language model saved in a local directory, never downloaded.

AutoModelForCausalLM with local_files_only: with a weights file in DIR they are loaded, without one the
model is initialised from config.json under the run's seed. The wrapper takes a batch of ids padded
with -1 (tokens.MASKED), passes the mask of real tokens as the attention mask and returns the logits:
gaccum computes the loss from them (summed cross-entropy, padding ignored), never the model's own
mean loss, so tokens are weighted exactly whatever the model.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gaccum_core.config import ConfigError, RunConfig
from gaccum_core.words import first_line
from gaccum_core.hfdir import MASKED, hf_directory
from gaccum_core.models.hf_weights import check_weights, weights_file

_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "seq_length")


class CausalLM(nn.Module):
    """Ids (N, T), -1 where padded -> next-token logits (N, T, vocab) of the wrapped model."""

    def __init__(self, model: nn.Module, origin: str) -> None:
        super().__init__()
        self.model = model
        self.origin = origin  # where the weights came from, for the run's status and the page

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The logits; padding (id -1) is masked out of attention and fed as id 0, which it cannot affect."""
        if ids.shape[0] == 0:
            # A data-parallel rank's empty share of a last window: attention cannot reshape zero rows, so one
            # dummy token goes through and none of its logits come out; backward then gives every parameter
            # a zero gradient, and DDP's all-reduce still hears from this rank. forward, not __call__: a
            # sharded root's hooks (FSDP's gathers) must run once, as on the ranks with samples.
            return self.forward(torch.zeros(1, 1, dtype=ids.dtype, device=ids.device))[:0]
        mask = ids.ne(MASKED)
        return self.model(input_ids=ids.clamp(min=0), attention_mask=mask.long(), use_cache=False).logits

    @torch.no_grad()
    def generate(self, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy continuation of a (T,) prompt by new_tokens ids (the model's own generate, with its cache)."""
        ids = prompt.unsqueeze(0)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                  do_sample=False, pad_token_id=self.model.config.eos_token_id)
        return out[0, ids.shape[1]:]


def model_config(model: str) -> Any:
    """The transformers config of model 'hf:DIR', checked to be a causal language model."""
    path = hf_directory(model)
    if not (path / "config.json").is_file():
        raise ConfigError("model", model, f"a directory with the model's config.json (save it there with "
                          f"model.save_pretrained): {path} has none")
    _quiet()
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    try:
        config = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # an unknown model_type, a broken JSON
        raise ConfigError("model", model, f"a config.json transformers can read: {first_line(exc)}") from None
    if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        kinds = ", ".join(getattr(config, "architectures", None) or []) or "no architectures"
        raise ConfigError("model", model, f"a causal language model (AutoModelForCausalLM): its config.json is a "
                          f"{config.model_type!r} model ({kinds}), which is not one")
    return config


def positions(config: Any) -> int | None:
    """The longest sequence the model embeds, as its config states it (None when it states no limit)."""
    for name in _POSITION_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_hf(config: RunConfig, vocab_size: int) -> Any:
    """The model's config, checked against the run: a sequence within its positions, a tokenizer within its
    vocabulary, weights that fit the model. ConfigError naming max_seq_len or model."""
    hf_config = model_config(config.model)
    check_weights(config.model, hf_config)
    most = positions(hf_config)
    if most is not None and config.max_seq_len > most:
        raise ConfigError("max_seq_len", config.max_seq_len, f"an integer from 1 to {most} (the positions "
                          f"{config.model} embeds; a chunk holds max_seq_len + 1 tokens and feeds max_seq_len)")
    if vocab_size > hf_config.vocab_size:
        raise ConfigError("model", config.model, f"a tokenizer within the model's vocabulary: the tokenizer has "
                          f"{vocab_size} tokens, config.json's vocab_size is {hf_config.vocab_size}")
    return hf_config


def build_hf(config: RunConfig, vocab_size: int) -> CausalLM:
    """The model of config.model in float32 and train mode: its weights, or from config.json under torch's
    current seed (the caller seeds)."""
    hf_config = check_hf(config, vocab_size)
    if config.no_dropout:
        _zero_dropout_settings(hf_config)
    from transformers import AutoModelForCausalLM

    found = weights_file(config.model)
    if found is None:
        model = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32)
        origin = f"initialised from config.json with seed {config.seed} (no weights file in the directory)"
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(found.parent, config=hf_config, local_files_only=True,
                                                         trust_remote_code=False, dtype=torch.float32)
        except Exception as exc:  # a truncated or corrupt file: safetensors' or torch's error
            raise ConfigError("model", config.model, f"a directory whose weights load: {found.name} does not "
                              f"({first_line(exc)})") from None
        origin = f"weights loaded from {found.name}"
    return CausalLM(model.train(), origin)


def _zero_dropout_settings(hf_config: Any) -> None:
    """Every dropout probability the config holds (attention_dropout, resid_pdrop, …) set to 0."""
    for name, value in list(vars(hf_config).items()):
        if isinstance(value, float) and ("dropout" in name or name.endswith("pdrop")):
            setattr(hf_config, name, 0.0)


def _quiet() -> None:
    """No progress bars or advice on the worker's stderr, which the run's error message is read from."""
    from transformers.utils import logging

    logging.disable_progress_bar()
    logging.set_verbosity_error()
