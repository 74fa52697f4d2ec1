"""Data sets by name as batch sources: sources (what every data set is), images (digits, torchvision's,
fake), folders (your own images, one folder per class), user (your own dataset function), text (pydoc,
a text or .jsonl file) with tokens (bytes, or an hf: model's tokenizer), records and record_sequences (sft's
and pg's records, the loss over completion tokens, which record each loss token belongs to), load (any of them by name).

Imports only the shared vocabulary (config, seeding, hfdir, usercode).
"""
