"""The model and data set settings the Train, Plan and Equivalence pages share: a box of built-ins
ending in 'your own…' that reveals a text box, where an hf: model's weights come from, and the settings
of a language model (text file, JSON field, GPT size, sequence length) or of an image data set (its
folder, the image size).

Each draws through a page's FieldWidgets, so a refusal shows under the control that holds the value.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import streamlit as st

from gaccum_core import config as cfg
from gaccum_core.config import ConfigError
from gaccum_core.data.records import DEFAULT_DATA_DIR
from gaccum_core.hfdir import hf_directory
from gaccum_core.models.hf import model_config, weights_file
from gaccum_core.presets import GPT_PRESETS, millions
from dashboard.messages import OWN_LABELS, explain
from dashboard.state import FieldWidgets, kept, set_kept

OWN = "your own…"  # the last choice of the Model and Dataset boxes: a text box under it takes any other name
BUILT_INS = {"model": cfg.MODELS, "dataset": cfg.DATASETS}
PLACEHOLDERS = {"model": "timm:resnet18, my_models.py:build or hf:path/to/model_dir",
                "dataset": "my_data.py:load or my_package.data:load"}
OWN_HELP = {
    "model": "timm:NAME (any timm image model, untrained); your factory MODULE:FUNCTION or FILE.py:FUNCTION, "
             "called with input_shape=(C, H, W) and num_classes=N (a file or module in the folder the server's "
             "GACCUM_USER_CODE names, run only in the run's worker); or hf:path/to/model_dir, a Hugging Face "
             "causal language model saved there with its tokenizer (never downloaded; trains on pydoc or text)",
    "dataset": "your function MODULE:FUNCTION or FILE.py:FUNCTION, called with no arguments, returning "
               "(train, test) datasets whose items are (float image tensor (C, H, W), int label) (a file or module "
               "in the folder the server's GACCUM_USER_CODE names, run only in the run's worker)",
}


def _show_own(prefix: str, field: str) -> None:
    """A name kept (a run in progress adopted, the Plan page's settings) that is not a built-in: the box
    shows 'your own…' and the text box under it the name."""
    name = kept(prefix + field)
    if name is not None and name not in BUILT_INS[field] and name != OWN:
        set_kept(f"{prefix}own_{field}", name)
        set_kept(prefix + field, OWN)
        st.session_state.pop(f"{prefix}{field}", None)
        st.session_state.pop(f"{prefix}own_{field}", None)


def choose(fields: FieldWidgets, field: str) -> str:
    """The box of `field` ("model" or "dataset"): its built-ins, then 'your own…', which reveals a text box
    (field own_model / own_dataset). Returns the name chosen or typed; a refusal shows under what was typed."""
    _show_own(fields.prefix, field)
    name = fields.add(field, st.selectbox, options=[*BUILT_INS[field], OWN])
    if name != OWN:
        return name
    own = f"own_{field}"
    typed = fields.add(own, st.text_input, "", placeholder=PLACEHOLDERS[field], help=OWN_HELP[field])
    fields.values[field] = typed.strip()
    del fields.values[own]
    fields.slots[field] = fields.slots.pop(own)
    return fields.values[field]


def hf_origin(model: str) -> str:
    """Where an hf: model's weights come from, read off its directory's file names (nothing is loaded);
    ConfigError naming model for a directory that does not exist or holds no config.json."""
    if not (hf_directory(model) / "config.json").is_file():
        model_config(model)  # refuses the directory, naming config.json, before it would import transformers
    found = weights_file(model)
    return (f"weights from {found.name}" if found is not None
            else "no weights file: initialised from config.json with the run's seed")


def model_note(fields: FieldWidgets, model: str) -> str | None:
    """Under an hf: model's name, where its weights come from. A directory that cannot be one is refused
    there instead: returns that message (the page's first problem), else None."""
    if not cfg.is_hf(model):
        return None
    try:
        origin = hf_origin(model)
    except ConfigError as exc:
        message = explain(exc, OWN_LABELS)  # named by the box it was typed in
        fields.error("model", message)
        return message
    st.caption(origin[0].upper() + origin[1:])
    return None


def wants_text(model: str, dataset: str) -> bool:
    """Whether the text settings apply: a language model, or a text data set (whichever the other is)."""
    return cfg.is_language_model(model) or dataset in cfg.TEXT_DATASETS


def _preset_label(preset: str) -> str:
    return f"{preset} · {millions(GPT_PRESETS[preset].parameters)} parameters"


def _preset_caption(preset: str) -> str:
    shape = GPT_PRESETS[preset]
    return (f"gpt {preset}: {millions(shape.parameters)} parameters, {shape.layers} layers × {shape.width} wide, "
            f"{shape.heads} heads, sequences of up to {shape.max_len} tokens (bytes)")


def text_settings(fields: FieldWidgets, model: str, dataset: str) -> None:
    """A language run's settings: where its text is (a text file, folder or glob and the field of .jsonl lines;
    a tokens or hf-dataset folder), where it is kept tokenised, gpt's size, the sequence length, packing."""
    if dataset == "text":
        path = fields.add("text_file", st.text_input,
                          placeholder="notes.txt (paragraphs split by blank lines), notes.jsonl, a folder or a glob")
        if not path.strip().lower().endswith(".txt"):  # .jsonl, or a folder or glob that may hold .jsonl shards
            fields.add("text_field", st.text_input)
        fields.add("text_file_max_mb", st.number_input, step=64)
    elif dataset == "tokens":
        fields.add("data_dir", st.text_input, help="the folder of nanoGPT's train.bin (and val.bin) of token ids")
        fields.add("token_dtype", st.radio, options=cfg.TOKEN_DTYPES, horizontal=True)
    elif dataset == "hf-dataset":
        fields.add("data_dir", st.text_input, help="a folder datasets' save_to_disk wrote, or of .parquet files")
        fields.add("text_field", st.text_input)
    elif dataset in cfg.RECORD_DATASETS:
        _records(fields, dataset)
    if dataset in ("text", "hf-dataset", *cfg.RECORD_DATASETS):
        fields.add("cache_dir", st.text_input, placeholder="token-cache beside the runs directory")
    if model == "gpt":
        preset = fields.add("gpt_preset", st.selectbox, options=cfg.GPT_PRESET_NAMES, format_func=_preset_label)
        if preset in GPT_PRESETS:
            st.caption(_preset_caption(preset))
    fields.add("max_seq_len", st.number_input, step=16)
    if dataset != "tokens":  # a tokens data set is packed by nature
        fields.add("packing", st.radio, options=cfg.ON_OFF[::-1], horizontal=True)


def _records(fields: FieldWidgets, dataset: str) -> None:
    """Where sft's or pg's records come from: a .jsonl file (folder, glob), else a saved data set's folder, else
    the bundled ones; said in a line under the boxes."""
    path = fields.add("text_file", st.text_input, placeholder="empty: the bundled records, or records.jsonl, a folder "
                      "or a glob")
    folder = fields.add("data_dir", st.text_input, help="when the text file is empty: a folder datasets' "
                        f"save_to_disk wrote, or of .parquet files ({DEFAULT_DATA_DIR}: the bundled records)")
    if isinstance(path, str) and isinstance(folder, str):
        source = (f"the records of {path.strip()}" if path.strip() else f"the rows of {folder}"
                  if folder != DEFAULT_DATA_DIR else f"the bundled {dataset} records (nothing downloaded)")
        st.caption(f"Reads {source}.")


def control_spec(name: str, config: cfg.RunConfig | None = None) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The widget a field's metadata and type ask for: a select box of the choices it offers `config` (all of them
    without one), a check box, a number box or a text box (a setting with a section and no code of the page's own)."""
    field = next(f for f in dataclasses.fields(cfg.RunConfig) if f.name == name)
    if field.metadata["choices"] is not None:
        offered = field.metadata["offered"]
        return st.selectbox, {"options": offered(config) if offered and config else field.metadata["choices"]}
    kind = field.type if isinstance(field.type, str) else field.type.__name__
    return {"bool": (st.checkbox, {}), "int": (st.number_input, {"step": 1}),
            "float": (st.number_input, {})}.get(kind, (st.text_input, {}))


def generated(fields: FieldWidgets, section: str, leave_out: tuple[str, ...] = ()) -> None:
    """The controls of the fields that join `section` (setting's section, but those left out) where they apply to
    the values drawn so far, each offering the choices its field offers them; a value kept that is not offered
    (group-mean-token-mean, kept from pg, for sft) gives way to the first offered."""
    for name in cfg.fields_with("section", section):
        values = {**fields.defaults.to_dict(), **fields.values}  # with the controls drawn before this one
        try:
            config = cfg.RunConfig(**values)
        except ValueError:  # a refused value (its message says why): the rules read the values as they are
            config = unchecked(values)
        try:
            shown = cfg.applies(config, name)
        except (TypeError, ValueError):  # a value of the wrong kind typed: its message says why, the control stays
            shown = True
        if shown and name not in leave_out:
            draw, kwargs = control_spec(name, config)
            if "options" in kwargs and fields.kept(name, getattr(fields.defaults, name)) not in kwargs["options"]:
                set_kept(fields.prefix + name, kwargs["options"][0])
            fields.add(name, draw, **kwargs)


def unchecked(values: dict[str, Any]) -> cfg.RunConfig:
    """A RunConfig of these values not validated (a combination may be refused: fsdp with N = 1), only for its
    fields' rules (applies, offered) to read."""
    config = object.__new__(cfg.RunConfig)
    for field, value in values.items():
        object.__setattr__(config, field, value)
    return config


def image_settings(fields: FieldWidgets, dataset: str) -> None:
    """An image run's data settings: the fake set's size and classes, the folder of mnist, fashionmnist, cifar10
    (and whether to download it) or of your image folder, and the image size."""
    if dataset == "fake":
        fields.add("fake_samples", st.number_input, step=256)
        fields.add("fake_classes", st.number_input, step=1)
    if dataset in ("mnist", "fashionmnist", "cifar10"):
        fields.add("data_dir", st.text_input)
        fields.add("download", st.checkbox)
    if dataset == "imagefolder":
        fields.add("data_dir", st.text_input, help="a folder with one sub-folder of images per class, "
                   "or train/ and val/ (or test/) each holding such sub-folders")
    fields.add("image_size", st.number_input, step=8)
