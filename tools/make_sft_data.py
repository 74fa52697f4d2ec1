"""Write gaccum_core/data/bundled/sft.jsonl, sft's bundled records (run once; the file is committed and shipped).

Records of a prompt and a completion, drawn with a fixed seed from small tasks whose answers follow from the
prompt (arithmetic, reversing a word, counting, spelling a number, listing a range, upper-casing a sentence), so
a small model can lower the completion loss. Prompts and completions vary in length: some records are longer
than the default max_seq_len (128 byte tokens), so truncation happens, and a few prompts alone are, so those
records keep no completion token. Usage: python tools/make_sft_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "gaccum_core" / "data" / "bundled" / "sft.jsonl"
RECORDS = 240
WORDS = ("gradient", "window", "batch", "token", "sequence", "optimizer", "momentum", "scaler", "checkpoint",
         "accumulate", "prompt", "completion", "average", "memory", "shard")
ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _spell(n: int) -> str:
    return " ".join(ONES[int(d)] for d in str(n))


def _record(rng: random.Random) -> dict[str, str]:
    kind = rng.choices(range(7), weights=(3, 2, 2, 2, 2, 2, 1))[0]
    if kind == 0:
        a, b = rng.randrange(100), rng.randrange(100)
        return {"prompt": f"What is {a} + {b}? ", "completion": f"{a} + {b} = {a + b}."}
    if kind == 1:
        word = rng.choice(WORDS)
        return {"prompt": f"Reverse the word '{word}': ", "completion": word[::-1]}
    if kind == 2:
        words = rng.choices(WORDS, k=rng.randrange(2, 9))
        return {"prompt": f"How many words are in '{' '.join(words)}'? ", "completion": f"{len(words)} words."}
    if kind == 3:
        n = rng.randrange(10**rng.randrange(1, 7))
        return {"prompt": f"Spell {n} digit by digit: ", "completion": _spell(n) + "."}
    if kind == 4:
        start = rng.randrange(50)
        stop = start + rng.randrange(3, 40)
        return {"prompt": f"List the numbers from {start} to {stop}: ",
                "completion": ", ".join(map(str, range(start, stop + 1))) + "."}
    if kind == 5:
        sentence = " ".join(rng.choices(WORDS, k=rng.randrange(3, 20)))
        return {"prompt": f"Repeat in capitals: {sentence}\n", "completion": sentence.upper()}
    context = " ".join(rng.choices(WORDS, k=rng.randrange(18, 30)))  # a prompt longer than 128 bytes alone
    return {"prompt": f"Read this: {context}. Which word came first? ", "completion": context.split()[0] + "."}


def main() -> None:
    rng = random.Random(43)
    lines = [json.dumps(_record(rng)) for _ in range(RECORDS)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {RECORDS} records, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
