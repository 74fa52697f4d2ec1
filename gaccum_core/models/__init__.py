"""Models by name (build): image classifiers (vision, timm_zoo, your factory), the byte-level GPT (gpt) and
Hugging Face causal LMs saved on disk (hf, with hf_weights checking their weight files before a run); a timm or
torchvision classifier started from your weights file (pretrained, which checks that it fits).

Imports only the shared vocabulary (config, seeding, hfdir).
"""
