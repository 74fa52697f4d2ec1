"""Runs: the run store (the only module that touches a run's files), the catalog that reads it, and the
runner that trains runs in the background — in a thread (execute) or a worker process (supervisor,
worker; torchrun for data-parallel runs). Imports the shared vocabulary and train.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "store": ("RunStore", "StoreError", "validate_run_id"),
    "catalog": ("run_table", "run_label", "run_labels", "describe_run", "settings_table", "combined_csv"),
    "runner": ("Runner", "RunSnapshot", "RunBusyError", "EXECUTORS"),
    "supervisor": ("Launch",),
})
