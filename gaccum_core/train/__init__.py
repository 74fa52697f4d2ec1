"""Training: the accumulation contract and everything one optimizer step needs, composed by the engine.

accumulation (windows and weights, pure) and aggregation (per-token weights of every loss aggregation mode,
pure) → weighting (one window's divisors or weights) → step (one accumulated optimizer step) with precision,
loss and optim → engine (a run's loop: data, model, checkpoints), which calls rows (each step's metrics
row, into metrics' sinks), evaluation (test split, sample text) and errors; checks (preflight) tests a
config before a run, with device (what this machine can run); memory, distributed (DDP), fsdp (FSDP2
sharding) and checkpoint (the one checkpoint manager: checkpoint.pt and a sharded run's DCP directories,
written atomically, read, checked against a changed config, pruned; checkpoint_state: what it captures)
sit beside them.
Imports the shared vocabulary, models and data.
"""
