"""The lab: the Equivalence check (one big batch against its micro-batches), the loop code a run
trains with, and the Pitfalls (the tutorials' deliberate bugs, written apart from the engine).
Imports the shared vocabulary and train.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "equivalence": ("compare_gradients", "train_side_by_side", "ReferenceTooLarge"),
    "loopcode": ("render_loop",),
    "pitfalls": ("PITFALLS", "run_pitfall", "run_all"),
})
