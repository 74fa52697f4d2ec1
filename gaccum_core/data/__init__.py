"""Data sets by name as batch sources: sources (what every data set is), images (digits, torchvision's,
fake), folders (your own images, one folder per class), text (pydoc, a text file, byte-level), load (any of them by name).

Imports only the shared vocabulary (config, seeding, presets).
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "load": ("load_data", "describe_dataset"),
    "sources": ("DataBundle", "DataError", "ImageSource"),
    "images": ("digits_split",),
    "text": ("TokenSequences", "IGNORE"),
})
