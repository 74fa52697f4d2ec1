"""The body of a process that writes the runs index while another does: a module of its own, so that a spawned
child imports the store and the catalog only (the test file that starts it imports torch: seconds of CPU each)."""

from gaccum_core.runs.catalog import run_table
from gaccum_core.runs.store import RunStore


def write_rounds(root: str, run_ids: list[str], rounds: int, start, done) -> None:
    """Change these runs' status, then list (indexing every change), each round; put how many runs on `done`."""
    store = RunStore(root)
    start.wait(timeout=120)
    for i in range(rounds):
        for run_id in run_ids:
            store.update_status(run_id, message=f"round {i}")
        run_table(store)
    done.put(len(run_ids))
