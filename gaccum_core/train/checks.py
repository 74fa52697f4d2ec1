"""What only the device, the data and the model can tell about a config, checked before a run starts."""

from __future__ import annotations

import torch

from gaccum_core.config import ConfigError, RunConfig, is_hf
from gaccum_core.data.load import load_data
from gaccum_core.data.text import CORPUS_DATASETS, cache_status, check_corpus
from gaccum_core.data.tokens import tokens_for
from gaccum_core.models.hf import check_hf  # imports transformers only when it checks a model
from gaccum_core.models.vision import build_model
from gaccum_core.train.activation import chosen_blocks
from gaccum_core.train.device import cuda_graphs_refusal, max_processes, option_unavailable, resolve_device
from gaccum_core.usercode import check_named, runs_here, user_code_fields


def check_micro_batch(config: RunConfig, num_train: int, whole_window: bool = False) -> None:
    """Refuse micro-batches larger than the training set; with whole_window, a window of b·k larger than
    it too (a comparison with one big batch of the window needs every sample of it)."""
    b, k = config.micro_batch_size, config.accum_steps
    if b > num_train:
        raise ConfigError("micro_batch_size", b, f"at most {num_train}, the size of the {config.dataset} training set")
    if whole_window and b * k > num_train:
        raise ConfigError("accum_steps", k, f"at most {num_train // b} with b = {b}: the big batch of "
                          f"b·k = {b * k} samples must fit in the {config.dataset} training set ({num_train})")


def _check_options(config: RunConfig, device: torch.device) -> None:
    """Refuse an amp or compile setting this device cannot run, naming the field."""
    graphs = cuda_graphs_refusal(device.type, config.compile, config.accum_steps)
    if graphs is not None:
        raise ConfigError("compile", config.compile, graphs)
    for field in ("amp", "compile"):
        value = getattr(config, field)
        why = option_unavailable(device, **{field: value})
        if why is not None:
            instead = f"off or a precision {device} supports" if field == "amp" else "off"
            raise ConfigError(field, value, f"{instead} ({why})")


def _check_processes(config: RunConfig, device: torch.device) -> None:
    most = max_processes(device)
    if config.nproc > most:
        unit = "GPUs" if device.type == "cuda" else "CPU cores"
        raise ConfigError("nproc", config.nproc, f"1 to {most}, the {unit} of this machine")


def preflight(config: RunConfig, whole_window: bool = False) -> None:
    """Check, before any run directory exists, what only the device, data and model can tell; with
    whole_window, that one window of b·k samples fits in the training set (check_micro_batch).

    Where your own code may not run (the dashboard's server), a model or data set of yours is only read
    (usercode.check_named): what it builds or loads is checked by the run's worker when it starts."""
    device = resolve_device(config.device)
    _check_options(config, device)
    _check_processes(config, device)
    unread = dict(user_code_fields(config)) if not runs_here() else {}
    for field, value in unread.items():
        check_named(field, value)
    if "dataset" in unread:
        return
    if config.dataset in CORPUS_DATASETS and not cache_status(config).cached:
        # Tokenised on Start, never here (the Train page checks in the server's process): its files, first
        # documents and tokenizer now; the micro-batch against its sequences once the run has them.
        check_corpus(config)
        if is_hf(config.model):
            check_hf(config, tokens_for(config).vocab_size)
        return
    data = load_data(config)
    if is_hf(config.model):  # its config, positions, vocabulary and weights file, without loading the weights
        check_hf(config, data.num_classes)
    check_micro_batch(config, len(data.train), whole_window)
    if not config.is_text and "model" not in unread:  # an image model must take the images at this size
        # (and your weights file fit it: read and loaded here, so a misfit is refused before a run exists)
        model = build_model(config.model, data.input_shape, data.num_classes, config.image_size, config.weights_file)
        chosen_blocks(model, config)  # and have blocks to checkpoint, when asked
