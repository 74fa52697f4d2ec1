"""The installed transformers `Trainer`, checked through its own `training_step`.

`window` does what `Trainer._inner_training_loop` does for one optimizer step: it fetches the window's micro-batches
(up to the configured `gradient_accumulation_steps`, given by `--fixed-k K`; fewer at the epoch's end) with the
Trainer's own `get_batch_samples`, which counts `num_items_in_batch` (the window's labelled tokens, over
`labels[..., 1:]` for a causal LM), sets `current_gradient_accumulation_steps` to the window's length, and calls
`training_step(model, inputs, num_items_in_batch)` on each micro-batch (forward, loss scaling, backward). The model is
a tiny Llama built from its config, nothing downloaded; the sequences are of different lengths, padding labelled -100.
"""

import tempfile

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

VOCAB, SAMPLES, LONGEST = 64, 8, 12


def setup() -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A two-layer Llama of width 16 and one batch of SAMPLES right-padded sequences of 2 to LONGEST tokens."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=LONGEST,
                         pad_token_id=0, bos_token_id=1, eos_token_id=2)
    lengths = torch.randint(2, LONGEST + 1, (SAMPLES,))
    input_ids = torch.randint(3, VOCAB, (SAMPLES, LONGEST))
    padding = torch.arange(LONGEST) >= lengths[:, None]
    input_ids[padding] = 0
    batch = {"input_ids": input_ids, "attention_mask": (~padding).long(), "labels": input_ids.masked_fill(padding, -100)}
    return LlamaForCausalLM(config), batch


def window(model: nn.Module, micro_batches: list[dict[str, torch.Tensor]], fixed_k: int) -> None:
    """One optimizer step of the Trainer's inner loop with gradient_accumulation_steps = fixed_k: fetch up to fixed_k
    micro-batches and count their tokens as it does (fewer at the epoch's end), then each training_step."""
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(output_dir=output_dir, report_to=[], use_cpu=True, per_device_train_batch_size=1,
                                 gradient_accumulation_steps=fixed_k, save_strategy="no")
        trainer = Trainer(model=model, args=args)
        fetched, num_items_in_batch = trainer.get_batch_samples(iter(micro_batches), fixed_k, args.device)
        trainer.current_gradient_accumulation_steps = len(fetched)
        for inputs in fetched:
            trainer.training_step(trainer.model, inputs, num_items_in_batch)


def objective(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's own loss on the whole batch: the mean next-token loss over its labelled tokens."""
    return model(**batch).loss
