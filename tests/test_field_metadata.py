"""A setting declares itself once: a throwaway field added to RunConfig's source, and nothing else, reaches every
place that names a setting (the Train page's control with its label and help, its URL key, the command line's
flag, a sweep's axis, a run's label, the TensorBoard hparams, the runs table's column and the docs' settings row).

The field is added in a child process (the config module compiled from its source with one line more), so this
process's RunConfig stays as it is."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELP = "throwaway: soften the targets by this much"
FIELD = (f'    label_smoothing: float = setting(0.0, "Label smoothing", "{HELP}", short="ls", column=True,\n'
         '                                     section="Optimizer")\n')
ANCHOR = "\n    def __post_init__"

PROBE = '''
import contextlib, importlib.util, io, json, sys
from pathlib import Path

ROOT, FIELD, ANCHOR = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
path = ROOT / "gaccum_core/config.py"
source = path.read_text(encoding="utf-8")
assert source.count(ANCHOR) == 1
spec = importlib.util.spec_from_file_location("gaccum_core.config", path)
module = importlib.util.module_from_spec(spec)
sys.modules["gaccum_core.config"] = module
exec(compile(source.replace(ANCHOR, "\\n" + FIELD + ANCHOR), str(path), "exec"), module.__dict__)

from streamlit.testing.v1 import AppTest
import streamlit as st
from dashboard.choices import control_spec
from dashboard.sweep_controls import PAGE_AXES, axis_control
from gaccum_core.cli.main import build_parser, command_help
from gaccum_core.cli.sweep import spec_from_args
from gaccum_core.cli.args import config_from_args
from gaccum_core.config import RunConfig
from gaccum_core.runs import catalog
from gaccum_core.tensorboard.out import settings_events
from gaccum_core.sweeps.labels import describe_sweep
sys.path.insert(0, str(ROOT / "docs/hooks"))
from settings import settings_page

found = {}
draw, kwargs = control_spec("label_smoothing")
found["control"] = [draw is st.number_input, kwargs]
at = AppTest.from_file(str(ROOT / "app_pages/1_Train.py"), default_timeout=120).run()
box = at.number_input(key="cfg_label_smoothing")
found["widget"] = [box.label, box.help]
box.set_value(0.25).run()
found["url"] = at.query_params.get("label_smoothing")
found["flag_help"] = "--label-smoothing" in command_help("run")
found["flag"] = config_from_args(build_parser().parse_args(["run", "--label-smoothing", "0.5"])).label_smoothing
sweep = spec_from_args(build_parser().parse_args(["sweep", "--label-smoothing", "0,0.1"]))
found["axis"] = [list(sweep.fields), describe_sweep(sweep)]
found["page_axis"] = ["label_smoothing" in PAGE_AXES, axis_control("label_smoothing")[0] is st.text_input]
found["labels"] = catalog.run_labels([RunConfig(), RunConfig(label_smoothing=0.1)])
found["column"] = "label_smoothing" in catalog.SETTINGS
events = settings_events(RunConfig(label_smoothing=0.1), "run-1", "", 0)
found["hparams"] = sum(b"label_smoothing" in event.SerializeToString() for event in events)
found["row"] = [line for line in settings_page().splitlines() if "label_smoothing" in line]
print("FOUND " + json.dumps(found))
'''


def test_a_new_plain_setting_is_declared_once_and_every_generator_offers_it(tmp_path):
    env = {**os.environ, "GACCUM_RUNS_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), FIELD, ANCHOR], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("FOUND ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    found = json.loads(lines[0].removeprefix("FOUND "))
    assert found["control"] == [True, {}]  # a float: a number box
    assert found["widget"] == ["Label smoothing", HELP]  # drawn on the Train page, under Optimizer
    assert found["url"] == "0.25"  # its URL key is its name
    assert found["flag_help"] and found["flag"] == 0.5
    assert found["axis"][0] == ["label_smoothing"] and ": ls," in found["axis"][1]  # crossed, said by its short word
    assert found["page_axis"] == [True, True]  # the Sweeps page's axis: a box of comma-separated numbers
    assert found["labels"][1].endswith("ls=0.1") and "ls=" in found["labels"][0]  # where the runs differ
    assert found["column"]
    assert found["hparams"] >= 1
    assert found["row"] == [f"| `label_smoothing` | `--label-smoothing` | `0.0` |  | {HELP} |"]
