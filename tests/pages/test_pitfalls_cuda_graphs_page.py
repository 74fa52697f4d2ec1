"""AppTest for the Pitfalls page's CUDA-graphs case on a machine without CUDA: shown, its button saying it needs a
CUDA device, with torch's message and gaccum's refusal."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from gaccum_core.lab.pitfalls.catalog import CHECKPOINTING_PITFALLS, FSDP_PITFALLS, PITFALLS, pitfall
from gaccum_core.lab.pitfalls.cuda_graphs import KEY

ROOT = Path(__file__).resolve().parents[2]


def test_pitfall_page_shows_the_cuda_graphs_case_and_says_it_needs_cuda(runs_dir):
    at = AppTest.from_file(str(ROOT / "app_pages/4_Pitfalls.py"), default_timeout=120).run()
    assert not at.exception
    number = len(PITFALLS) + len(FSDP_PITFALLS) + len(CHECKPOINTING_PITFALLS) + 1
    assert at.subheader[number - 1].value == f"{number}. {pitfall(KEY).title}"
    assert not at.code  # nothing shown before the button

    at.button(key="pitfalls_cuda_graphs_run").click().run()
    assert not at.exception and not at.error
    assert any(m.value.startswith("Needs a CUDA device (cpu here)") for m in at.markdown)
    error, refusal = (c.value for c in at.code)
    assert error.startswith("Error: accessing gradient tensor output of CUDAGraphs") and "accumulation" in error
    assert refusal.startswith("compile='reduce-overhead' is not allowed: off or default with accum_steps = 4")
