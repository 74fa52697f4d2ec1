"""The memory planner: for an effective batch and a memory budget, which micro-batch fits with which
options. search (pure) → probe (a measured burst of the engine) → planner (make_plan); costs measures
what costly options cost on this machine. Imports the shared vocabulary and train.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "planner": ("Plan", "PlanRequest", "make_plan", "config_from_plan", "default_request", "default_budget_mb"),
    "search": ("Candidate", "Options", "mb"),
    "costs": ("warnings_for",),
})
