"""Models by name: image classifiers (vision) and the byte-level GPT (gpt).

Imports only the shared vocabulary (config, seeding).
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "vision": ("build_model", "build_seeded_model", "model_input_size", "ModelInputError", "BUILTIN_MODELS"),
    "gpt": ("GPT", "build_gpt"),
})
