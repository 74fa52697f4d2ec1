"""Training: the accumulation contract and everything one optimizer step needs, composed by the engine.

accumulation (windows and weights, pure) → step (one accumulated optimizer step) with precision,
loss and optim → engine (a run's loop: data, model, metrics, evaluation, checkpoints), with device,
memory, distributed (DDP) and checkpoint beside it. Imports the shared vocabulary, models and data.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "accumulation": ("plan_epoch", "planned_steps", "micro_batch_divisors", "epoch_order"),
    "step": ("Optimization", "accumulate_step"),
    "precision": ("Precision",),
    "engine": ("Engine", "preflight", "CompileError", "Diverged"),
    "device": ("resolve_device", "device_name", "memory_info", "autocast_works"),
    "metrics": ("MetricSink", "NullSink", "Row", "STEP_COLUMNS", "EVAL_COLUMNS"),
    "checkpoint": ("CheckpointError",),
    "distributed": ("Ranks",),
})
