"""Corpora of any size: the first tokenisation's speed, then a cached corpus's start and memory.

For each size (synthetic JSONL written here from Python's documentation topics, paragraphs of random
lengths), and for gpt (bytes) and a saved hf: tokenizer (a byte-level BPE trained here):

- first tokenisation: MB/s of building the token cache (`tokenise_corpus`: reading, splitting, encoding,
  writing), against the bare tokenizer's batched encode of the same documents held in memory (the first 32 MB of
  them): `encode_arrays`, the call the build makes, and `encode_many` (lists of ints, as runs tokenised before
  the cache);
- cached: in a fresh process per run (the engine's thread executor), the seconds from `Runner.submit` to
  the first optimizer step and the process's peak resident memory (VmHWM), torch already imported.

Targets (issue 31): tokenising at >= 0.8 of the bare encode; a cached 1 GB corpus starts its first step within
5 s of a cached 8 MB one and peaks within 200 MB of it.

    .venv/bin/python bench/bench_corpus.py [--sizes 8,128,1024] [--tokenizers gpt,hf] [--repeats 3]
        [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gaccum_core.config import RunConfig  # noqa: E402
from gaccum_core.data.corpus import Corpus  # noqa: E402
from gaccum_core.data.text import pydoc_documents, tokenise_corpus  # noqa: E402
from gaccum_core.data.tokens import tokens_for  # noqa: E402

BARE_MB = 32  # documents held in memory for the bare encode
FIRST_STEP = r"""
import json, sys, time
from gaccum_core.config import RunConfig
from gaccum_core.execution.runner import Runner
import torch  # imported before the clock starts, as in a server that is up
config = RunConfig.from_json(sys.argv[1])
runner = Runner(sys.argv[2], executor="thread")
start = time.perf_counter()
run_id = runner.submit(config)
while not runner.snapshot(run_id).steps_done:
    if runner.snapshot(run_id).done:
        raise SystemExit(f"the run ended before a step: {runner.snapshot(run_id).state} {runner.snapshot(run_id).message}")
    time.sleep(0.005)
first = time.perf_counter() - start
runner.stop(run_id)
runner.wait(run_id, timeout=600)
# VmHWM, this process's own peak: ru_maxrss would carry the parent's peak over the exec (Linux keeps it).
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"first_step_s": first, "peak_mb": peak_kb / 1024}))
"""


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> None:
    """A JSONL corpus of about `megabytes` MB: documents of 1 to 12 pydoc paragraphs, written as they are made."""
    rng = random.Random(seed)
    paragraphs = [p.strip() for doc in pydoc_documents() for p in doc.split("\n\n") if len(p.strip()) > 20]
    target, written = megabytes << 20, 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            text = "\n\n".join(rng.choice(paragraphs) for _ in range(rng.randint(1, 12)))
            line = json.dumps({"text": text}) + "\n"
            out.write(line)
            written += len(line.encode("utf-8"))


def hf_model(workdir: Path) -> str:
    """hf:DIR of a tiny Llama-style model with a BPE tokenizer trained on pydoc (tests/hfmodels.py)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from hfmodels import save_model

    return "hf:" + str(save_model(workdir / "tiny-llama", positions=256))


def config_for(model: str, corpus: Path, cache: Path) -> RunConfig:
    return RunConfig(model=model, dataset="text", text_file=str(corpus), cache_dir=str(cache), max_seq_len=128,
                     micro_batch_size=8, accum_steps=4, max_steps=2, eval_every=10**6, eval_batches=2,
                     checkpoint_every=0, device="cpu")


def bare_mb_per_s(config: RunConfig) -> tuple[float, float]:
    """MB/s of the tokenizer's batched encode alone on the corpus's first BARE_MB MB of documents held in memory:
    (as arrays, the call the cache's build makes; as lists of ints, the call a run made before the cache)."""
    tokens, texts, size = tokens_for(config), [], 0
    for _, text in Corpus(config.text_file, config.text_field, config.text_file_max_mb).documents():
        texts.append(text)
        size += len(text.encode("utf-8"))
        if size >= BARE_MB << 20:
            break
    speeds = []
    for encode in (tokens.encode_arrays, tokens.encode_many):
        start = time.perf_counter()
        for begin in range(0, len(texts), 1024):
            encode(texts[begin:begin + 1024])
        speeds.append(size / 2**20 / (time.perf_counter() - start))
    return speeds[0], speeds[1]


def build_mb_per_s(config: RunConfig, megabytes: float) -> float:
    """MB/s of building the token cache from nothing (the cache folder removed first)."""
    shutil.rmtree(config.cache_dir, ignore_errors=True)
    start = time.perf_counter()
    tokenise_corpus(config)
    return megabytes / (time.perf_counter() - start)


def first_step(config: RunConfig, runs: Path) -> dict:
    """A fresh process's seconds from submit to the first step, and its peak resident MB."""
    runs.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-c", FIRST_STEP, config.to_json(), str(runs)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"first-step run failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="8,128,1024", help="corpus sizes in MB, comma-separated")
    parser.add_argument("--tokenizers", default="gpt,hf", help="gpt (bytes) and/or hf (a saved BPE tokenizer)")
    parser.add_argument("--repeats", type=int, default=3, help="first-step runs per corpus (median shown)")
    parser.add_argument("--workdir", default="", help="where corpora and caches go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the workdir")
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="gaccum-bench-corpus-"))
    workdir.mkdir(parents=True, exist_ok=True)
    models = {"gpt": "gpt", "hf": None}
    rows = []
    try:
        for size in [int(s) for s in args.sizes.split(",")]:
            corpus = workdir / f"corpus-{size}mb.jsonl"
            if not corpus.exists():
                write_corpus(corpus, size)
            megabytes = corpus.stat().st_size / 2**20
            for name in args.tokenizers.split(","):
                if models[name] is None:
                    models[name] = hf_model(workdir)
                config = config_for(models[name], corpus, workdir / f"cache-{name}")
                bare, lists = bare_mb_per_s(config)
                built = build_mb_per_s(config, megabytes)
                starts = [first_step(config, workdir / "runs") for _ in range(args.repeats)]
                row = {"corpus MB": round(megabytes), "tokenizer": name, "build MB/s": built, "bare MB/s": bare,
                       "lists MB/s": lists, "build/bare": built / bare,
                       "first step s": statistics.median(s["first_step_s"] for s in starts),
                       "peak MB": statistics.median(s["peak_mb"] for s in starts)}
                rows.append(row)
                print(json.dumps(row), flush=True)
                shutil.rmtree(config.cache_dir, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("\n| corpus | tokenizer | cache build MB/s | bare batched encode MB/s (arrays) | build / bare | "
          "encode as lists MB/s (before the cache) | cached: first step (s) | cached: peak RSS (MB) |\n"
          "|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['corpus MB']} MB | {r['tokenizer']} | {r['build MB/s']:.1f} | {r['bare MB/s']:.1f} | "
              f"{r['build/bare']:.2f} | {r['lists MB/s']:.1f} | {r['first step s']:.2f} | {r['peak MB']:.0f} |")
    for name in args.tokenizers.split(","):
        mine = [r for r in rows if r["tokenizer"] == name]
        if len(mine) > 1:
            small, large = mine[0], mine[-1]
            print(f"{name}: {large['corpus MB']} MB against {small['corpus MB']} MB cached: first step "
                  f"{large['first step s'] - small['first step s']:+.2f} s (target <= 5), peak "
                  f"{large['peak MB'] - small['peak MB']:+.0f} MB (target <= 200); build / bare "
                  f"{min(r['build/bare'] for r in mine):.2f} at worst (target >= 0.8)")


if __name__ == "__main__":
    main()
