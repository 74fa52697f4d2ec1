"""Training: the accumulation contract and everything one optimizer step needs, composed by the engine.

accumulation (windows and weights, pure) → step (one accumulated optimizer step) with precision,
loss and optim → engine (a run's loop: data, model, checkpoints), which calls rows (each step's metrics
row), evaluation (test split, sample text) and errors; checks (preflight) tests a config before a
run, with device (what this machine can run); memory, distributed (DDP) and checkpoint sit beside them.
Imports the shared vocabulary, models and data.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "accumulation": ("plan_epoch", "planned_steps", "micro_batch_divisors", "epoch_order"),
    "step": ("Optimization", "accumulate_step"),
    "precision": ("Precision", "DTYPES"),
    "engine": ("Engine",),
    "checks": ("preflight",),
    "errors": ("CompileError", "Diverged"),
    "evaluation": ("evaluate", "sample_text", "SAMPLE_PROMPT", "SAMPLE_TOKENS"),
    "device": ("resolve_device", "device_name", "memory_info", "autocast_works", "compile_works",
               "compile_works_here", "option_unavailable", "max_processes"),
    "metrics": ("MetricSink", "NullSink", "Row", "STEP_COLUMNS", "EVAL_COLUMNS"),
    "checkpoint": ("CheckpointError",),
    "distributed": ("Ranks",),
})
