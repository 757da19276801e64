"""Writes the builtin datasets next to this file (deterministic: run it again and the files are identical).

    python -m rlhf.data.builtin.make_builtin

All of them are single-digit tasks a byte-level tiny model can learn on a CPU in minutes:
    copy   "Repeat the digit: 7"  -> "7"
    add    "2+5="                 -> "7"   (sums of at most 9, so every answer is one digit)
    next   "What comes after 4?"  -> "5"

Files (column names are the defaults of DataSpec, so recipes need to name only what differs):
    arith, arith_eval            RL prompts: input, label, datasource (the task name; eval metrics per task)
    arith_rl                     the same columns, tasks weighted by RL_WEIGHTS (the embedded default's GRPO prompts)
    arith_eval_large             the same columns, EVAL_PER_TASK rows of every task (the embedded default's eval)
    sft_tiny, sft_tiny_eval      SFT pairs: input, output
    prefs_tiny, prefs_tiny_eval  preference pairs: chosen, rejected, each a two-message conversation whose
                                 user turn is the prompt (no data.prompt_key needed with a chat template);
                                 rejected is a wrong digit half of the time and a non-answer otherwise
    kto_tiny                     unpaired: input, output, label (true: the correct answer)

Why arith is learnable from random weights by GRPO: every answer is one digit and the ``exact`` verifier reads
only the response's first token, so a random policy is right by chance now and then (1 in ~260 with the byte-level
tiny tokenizer), and any *number* in first position earns a format credit of 0.1 (score still 0): with 8 samples
per prompt many groups hold a digit early, so the reward has a spread to learn from at once; once the policy
emits digits, one in ten is right by chance and the signal is about *which* digit. Copying
a digit from the prompt or adding two small ones is a pattern two attention layers can pick up. Train and eval
draw from the same 74 distinct prompts: the tasks test that the pipeline learns, not generalisation.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 1234
TASK_WEIGHTS = {"copy": 0.6, "add": 0.2, "next": 0.2}
# arith_rl: the embedded default's GRPO prompts, mostly add, the task its SFT warm-up (sft_tiny, weighted like arith)
# leaves weakest; copy and next stay in the mix so that RL keeps them.
RL_WEIGHTS = {"copy": 0.15, "add": 0.7, "next": 0.15}
EVAL_PER_TASK = 300  # arith_eval_large: the SE of each task's pass@1 is at most 0.5 / sqrt(299) = 0.029
NON_ANSWERS = ("x", "?", "no", "I don't know", "maybe", "ten", "a", "idk")


def make_task(rng: random.Random, task: str) -> tuple[str, str]:
    """One (prompt, answer) of the given task."""
    if task == "copy":
        d = rng.randrange(10)
        return f"Repeat the digit: {d}", str(d)
    if task == "add":
        a = rng.randrange(10)
        b = rng.randrange(10 - a)
        return f"{a}+{b}=", str(a + b)
    if task == "next":
        d = rng.randrange(9)
        return f"What comes after {d}?", str(d + 1)
    raise ValueError(task)


def tasks(rng: random.Random, n: int, mix: dict[str, float] = TASK_WEIGHTS) -> list[tuple[str, str, str]]:
    names = list(mix)
    weights = [mix[t] for t in names]
    out = []
    for _ in range(n):
        task = rng.choices(names, weights)[0]
        prompt, answer = make_task(rng, task)
        out.append((task, prompt, answer))
    return out


def wrong_answer(rng: random.Random, answer: str) -> str:
    if rng.random() < 0.5:
        return rng.choice([d for d in "0123456789" if d != answer])
    return rng.choice(NON_ANSWERS)


def arith(rng: random.Random, n: int) -> list[dict]:
    return [{"input": p, "label": a, "datasource": t} for t, p, a in tasks(rng, n)]


def arith_rl(rng: random.Random, n: int) -> list[dict]:
    return [{"input": p, "label": a, "datasource": t} for t, p, a in tasks(rng, n, RL_WEIGHTS)]


def arith_per_task(rng: random.Random, n: int) -> list[dict]:
    """n rows of every task, each an independent draw of make_task.

    Independent draws are what the eval's standard error assumes (rlhf.pipelines.rl_metrics.clustered_se: each
    row's samples one cluster, the rows independent), and they bound it whatever the model: a mean of n values in
    [0, 1] has a sample std of at most 0.5 * sqrt(n / (n - 1)), so the SE of a task's pass@1 is at most
    0.5 / sqrt(n - 1), 0.029 at n = 300. A task has few distinct prompts (copy 10, next 9, add 55), so prompts
    repeat, as independent draws of them do; the estimate is of the task's pass@1 over the generator's prompts."""
    return [
        {"input": p, "label": a, "datasource": t}
        for t in TASK_WEIGHTS
        for p, a in (make_task(rng, t) for _ in range(n))
    ]


def sft(rng: random.Random, n: int) -> list[dict]:
    return [{"input": p, "output": a} for _, p, a in tasks(rng, n)]


def prefs(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _, p, a in tasks(rng, n):
        user = {"role": "user", "content": p}
        rows.append(
            {
                "chosen": [user, {"role": "assistant", "content": a}],
                "rejected": [user, {"role": "assistant", "content": wrong_answer(rng, a)}],
            }
        )
    return rows


def kto(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _, p, a in tasks(rng, n):
        good = rng.random() < 0.5
        rows.append({"input": p, "output": a if good else wrong_answer(rng, a), "label": good})
    return rows


DATASETS = {  # name: (generator, rows); each file has its own seeded stream, so files are independent
    "arith": (arith, 500),
    "arith_eval": (arith, 50),
    "sft_tiny": (sft, 1000),
    "sft_tiny_eval": (sft, 100),
    "prefs_tiny": (prefs, 1000),
    "prefs_tiny_eval": (prefs, 100),
    "kto_tiny": (kto, 500),
    "arith_eval_large": (arith_per_task, EVAL_PER_TASK),  # appended: the files above keep their seeds
    "arith_rl": (arith_rl, 1000),
}


def write_all(out_dir: Path = HERE) -> list[Path]:
    written = []
    for i, (name, (make, n)) in enumerate(DATASETS.items()):
        rng = random.Random(SEED * 100 + i)
        path = out_dir / f"{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for row in make(rng, n):
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in write_all():
        print(p)
