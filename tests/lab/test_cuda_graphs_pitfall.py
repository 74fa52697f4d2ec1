"""The CUDA-graphs trap on a machine without CUDA: shown, not run, with torch's message for it and gaccum's
refusal of the same settings; in the catalog beside the other galleries."""

import torch

from gaccum_core.lab.pitfalls.catalog import CUDA_PITFALLS, PITFALLS, case_config, pitfall
from gaccum_core.lab.pitfalls.cuda_graphs import KEY, case_words, run_cuda_graphs_case


def test_the_case_is_in_the_catalog_and_compiles_in_a_cuda_graph_mode_with_k_above_1():
    assert list(CUDA_PITFALLS) == [KEY] and KEY not in PITFALLS and pitfall(KEY).title.startswith("torch.compile")
    config = case_config(KEY)
    assert config.compile == "reduce-overhead" and config.accum_steps > 1
    assert f"k={config.accum_steps}" in case_words() and "CUDA device" in case_words()


def test_without_cuda_it_is_shown_with_torchs_message_and_gaccums_refusal():
    case = run_cuda_graphs_case(torch.device("cpu"))
    assert not case.ran and case.max_grad_diff is None
    assert case.verdict.startswith("Needs a CUDA device (cpu here): not run")
    # torch 2.14's words for a .grad a later graph run reused (torch/_inductor/cudagraph_trees.py)
    assert case.error.startswith("Error: accessing gradient tensor output of CUDAGraphs that has been overwritten "
                                 "by a subsequent run") and "gradient accumulation" in case.error
    k = case_config(KEY).accum_steps
    assert case.refusal.startswith(f"compile='reduce-overhead' is not allowed: off or default with accum_steps = {k} "
                                   "on CUDA")
