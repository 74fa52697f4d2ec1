"""Any data set by name: the train and test sources a run reads, and one line that describes them."""

from __future__ import annotations

from gaccum_core.config import DATASETS, TEXT_DATASETS, RunConfig, is_factory
from gaccum_core.data.folders import describe_folder, folder_sources
from gaccum_core.data.images import describe_images, image_sources
from gaccum_core.data.sources import DataBundle, DataError
from gaccum_core.data.text import CORPUS_DATASETS, corpus_name, describe_text, text_sources
from gaccum_core.data.token_files import describe_tokens, files_identity, tokens_sources
from gaccum_core.data.tokens import tokens_for
from gaccum_core.data.user import describe_user, user_sources


def load_data(config: RunConfig) -> DataBundle:
    """The train/test sources of config.dataset; raises DataError (or ConfigError) if they cannot be had."""
    name = config.dataset
    if name in TEXT_DATASETS:
        train, test = tokens_sources(config) if name == "tokens" else text_sources(config)
        tokens = tokens_for(config)
        identity = (corpus_name(config) if name in CORPUS_DATASETS else files_identity(config) if name == "tokens"
                    else "")
        return DataBundle(name, train, test, tokens.vocab_size, (config.max_seq_len,), tokens, identity)
    if is_factory(name):
        train, test = user_sources(config)
        return DataBundle(name, train, test, train.num_classes, train.input_shape)
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}: choose one of {', '.join(DATASETS)}")
    train, test = folder_sources(config) if name == "imagefolder" else image_sources(config)
    return DataBundle(name, train, test, train.num_classes, train.input_shape)


def describe_dataset(config: RunConfig) -> str:
    """One line such as 'digits: 1437 train / 360 test, 1×8×8, 10 classes' (reads no image files but an
    image folder's, decoded once and cached for the run that follows)."""
    if config.dataset == "tokens":
        return describe_tokens(config)
    if config.dataset in TEXT_DATASETS:
        return describe_text(config)
    if config.dataset == "imagefolder":
        return describe_folder(config)
    if is_factory(config.dataset):
        return describe_user(config)
    if config.dataset not in DATASETS:
        raise DataError(f"unknown dataset {config.dataset!r}: choose one of {', '.join(DATASETS)}")
    return describe_images(config)
