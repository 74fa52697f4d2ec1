"""Models by name (build): image classifiers (vision, timm_zoo, your factory), the byte-level GPT (gpt) and
Hugging Face causal LMs saved on disk (hf).

Imports only the shared vocabulary (config, seeding, hfdir).
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "build": ("build_seeded_model", "active_dropout", "dropout_off"),
    "vision": ("build_model", "model_input_size", "ModelInputError", "BUILTIN_MODELS"),
    "gpt": ("GPT", "build_gpt"),
})
