"""Runs: training configs in the background and keeping each run's directory.

files (atomic writes, CSV rows appended whole and followed, a full disk named) → store (the runs
directory) → claim (which process owns a run) and integrity (damaged files named) → catalog (the
runs on disk as a table); execute (one run in this process) → worker (a run in a child process) and
supervisor (watching that child; rank_failures: which rank failed a torchrun job) → executors (thread or
process, the warm spare) → runner (queues per device, snapshots to poll). Imports the shared vocabulary
and train.
"""

from gaccum_core.exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "files": ("RunWriter", "CsvAppender", "CsvFollower", "replace_atomically", "write_text_atomically"),
    "store": ("RunStore", "StoreError", "validate_run_id", "now_iso"),
    "claim": ("Claim", "claimed_by", "RunBusyError"),
    "integrity": ("DamagedRun", "read_run"),
    "catalog": ("run_table", "describe_run", "run_label", "run_labels", "settings_table", "combined_csv"),
    "execute": ("failure_message",),
    "supervisor": ("Launch", "Child", "torchrun_command"),
    "snapshot": ("RunSnapshot",),
    "executors": ("EXECUTORS",),
    "runner": ("Runner",),
})
