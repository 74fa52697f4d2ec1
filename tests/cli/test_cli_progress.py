"""The command line's progress while a run goes: what a second Ctrl-C leaves in the run's message, the latest
evaluation, and a run not yet counted said to be starting (not "step 0 of ?")."""

from types import SimpleNamespace

from gaccum_core.cli.progress import SECOND_CTRL_C, follow
from gaccum_core.states import RunState


def test_a_second_ctrl_c_advises_resuming_only_a_run_that_has_a_checkpoint(tmp_path, capsys):
    """Issue 29 J: "it resumes from its last checkpoint" only where checkpoint.pt exists; else start it again."""
    said = []

    def interrupted(run_id, timeout=None):
        raise KeyboardInterrupt  # the first Ctrl-C while following, the second while waiting for the stop

    stopped = SimpleNamespace(run_id="r1", state=RunState.STOPPED, steps_done=0, total_steps=10, eta_s=None,
                              metrics=(), done=True)
    runner = SimpleNamespace(wait=interrupted, stop=lambda run_id: None, snapshot=lambda run_id: stopped,
                             abandon=lambda run_id, message: said.append(message),
                             store=SimpleNamespace(checkpoint_path=lambda run_id: tmp_path / "checkpoint.pt"))
    follow(runner, "r1")
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    follow(runner, "r1")
    assert said == [f"{SECOND_CTRL_C}: it has no checkpoint to resume from, start it again",
                    f"{SECOND_CTRL_C}: it resumes from its last checkpoint"]


def test_the_progress_line_says_the_latest_evaluation_and_what_it_covered(capsys):
    from gaccum_core.config import RunConfig

    step = {"loss": 2.0, "skipped_total": 0, "scale": None, "tokens_per_s": 5000.0}

    def snap(config, evals):
        return SimpleNamespace(run_id="r1", state=RunState.FINISHED, steps_done=4, total_steps=4, eta_s=None,
                               metrics=(step,), evals=evals, config=config, done=True, message="")

    language = snap(RunConfig(model="gpt", dataset="pydoc"), ({"perplexity": 12.345, "eval_tokens": 6400},))
    image = snap(RunConfig(model="mlp"), ({"test_accuracy": 0.91234, "eval_samples": 1600},))
    old = snap(RunConfig(model="mlp"), ({"test_accuracy": 0.5},))  # eval.csv from before the coverage columns
    for shown in (language, image, old):
        follow(SimpleNamespace(wait=lambda run_id, timeout=None, shown=shown: shown), "r1")
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].endswith("· perplexity 12.35 over 6,400 tokens")
    assert lines[1].endswith("· test acc 0.912 over 1,600 images") and lines[2].endswith("· test acc 0.500")


def test_a_run_whose_steps_are_not_counted_yet_is_said_to_be_starting(capsys):
    """Before the worker has loaded the data and built the model, a run's total is unknown: 'starting', not 'step 0
    of ?'; once counted, its steps of the total."""
    from gaccum_core.config import RunConfig

    def snap(state, total, steps):
        return SimpleNamespace(run_id="r1", state=state, steps_done=steps, total_steps=total, eta_s=None, metrics=(),
                               evals=(), config=RunConfig(model="mlp"), done=state == RunState.FINISHED, message="")

    shown = iter([snap(RunState.RUNNING, 0, 0), snap(RunState.RUNNING, 4, 2), snap(RunState.FINISHED, 4, 4)])
    follow(SimpleNamespace(wait=lambda run_id, timeout=None: next(shown)), "r1")
    lines = capsys.readouterr().err.splitlines()
    # Away from a terminal a line when the state changes, at most one per interval else, and the last.
    assert lines == ["r1 [running] starting: loading its data and model…", "r1 [finished] step 4 of 4 (100%)"]
