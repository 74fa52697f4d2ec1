"""The lab: the Equivalence check (one big batch against its micro-batches) and its verdict (which
modules differ, and the causes found on the model), the loop code a run trains with, and the Pitfalls
(the tutorials' deliberate bugs, written apart from the engine). Imports the shared vocabulary, models and train.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "equivalence": ("compare_gradients", "train_side_by_side", "GradientReport", "ReferenceTooLarge"),
    "verdict": ("MODULE_COLUMNS", "Reason"),
    "loopcode": ("render_loop",),
    "pitfalls": ("PITFALLS", "run_pitfall", "run_all", "FSDP_PITFALLS", "run_fsdp_pitfalls"),
})
