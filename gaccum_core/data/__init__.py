"""Data sets: images (digits, torchvision's, fake) and text (pydoc, a text file), as batch sources.

Imports the shared vocabulary and models (a text data set's vocabulary is the gpt's).
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "images": ("load_data", "describe_dataset", "DataBundle", "DataError", "ImageSource"),
    "text": ("TokenSequences", "IGNORE"),
})
