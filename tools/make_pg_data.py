"""Write gaccum_core/data/bundled/pg.jsonl, pg's bundled rollouts (run once; the file is committed and shipped).

Fixed rollouts for policy-gradient training: each prompt (a sum, a word to reverse, a count) has a group of G
completions (G from 4 to 6) of varied lengths, some right and some wrong, drawn with a fixed seed. Each record
holds prompt, completion, reward, advantage and group (the id its group's completions share).

The reward is 1.0 when the completion gives the right answer, else 0.0, less 0.001 per byte of completion past 40
(a small length penalty, so rewards within a group differ); every twelfth group's completions are all the
bare right answer, a group of equal rewards. A group's advantages are GRPO's:
(r - mean) / (std + EPS), with the group's mean and its unbiased standard deviation (as TRL's GRPOTrainer
computes them), and 0 for every completion of a group whose std is 0 (all rewards equal). Usage:
python tools/make_pg_data.py
"""

from __future__ import annotations

import json
import random
import re
import statistics
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "gaccum_core" / "data" / "bundled" / "pg.jsonl"
GROUPS = 48
EPS = 1e-4
WORDS = ("gradient", "window", "batch", "token", "sequence", "optimizer", "momentum", "scaler", "checkpoint")


def reward(completion: str, answer: str) -> float:
    """1.0 when the right answer is a word of the completion (else 0.0), less 0.001 a byte of it past 40."""
    right = re.search(rf"\b{re.escape(answer)}\b", completion) is not None
    return (1.0 if right else 0.0) - 0.001 * max(len(completion.encode("utf-8")) - 40, 0)


def advantages(rewards: list[float]) -> list[float]:
    """(r - mean) / (std + EPS) over the group (unbiased std); 0 for all when the std is 0."""
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    return [0.0 if std == 0 else (r - mean) / (std + EPS) for r in rewards]


def _task(rng: random.Random) -> tuple[str, str, list[str]]:
    """(prompt, the right answer, wrong answers) of one task."""
    kind = rng.randrange(3)
    if kind == 0:
        a, b = rng.randrange(100), rng.randrange(100)
        return f"What is {a} + {b}? ", str(a + b), [str(a + b + d) for d in (-10, -1, 1, 2, 10)]
    if kind == 1:
        word = rng.choice(WORDS)
        return f"Reverse the word '{word}': ", word[::-1], [word, word[::-1][1:], word[1:][::-1] + word[0] + "x"]
    words = rng.choices(WORDS, k=rng.randrange(2, 8))
    return f"How many words are in '{' '.join(words)}'? ", str(len(words)), [str(len(words) + d) for d in (-1, 1, 2)]


def _completion(rng: random.Random, answer: str) -> str:
    """The answer, sometimes with reasoning around it that makes it longer."""
    style = rng.randrange(4)
    if style == 0:
        return answer
    if style == 1:
        return f"The answer is {answer}."
    if style == 2:
        return f"Let me think step by step. Working it out carefully, I get {answer}. So the answer is {answer}."
    return f"{answer}, " + "I am sure of it, " * rng.randrange(1, 4) + "final."


def main() -> None:
    rng = random.Random(44)
    lines = []
    for g in range(GROUPS):
        prompt, right, wrong = _task(rng)
        size = rng.randrange(4, 7)
        answers = [right if rng.random() < 0.5 else rng.choice(wrong) for _ in range(size)]
        completions = [_completion(rng, answer) for answer in answers]
        if g % 12 == 0:  # a group whose completions are all the same right answer: std 0, advantages 0
            completions = [right] * size
        rewards = [round(reward(c, right), 6) for c in completions]
        for completion, r, a in zip(completions, rewards, advantages(rewards)):
            lines.append(json.dumps({"prompt": prompt, "completion": completion, "reward": r,
                                     "advantage": round(a, 6), "group": f"g{g:03d}"}))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(lines)} records in {GROUPS} groups, {OUT.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
