"""A small parquet made as veRL 0.9.1's GSM8K preprocessing makes it (examples/data_preprocess/gsm8k.py in veRL's
repository): the same ``process_fn`` over local GSM8K-style rows (no dataset hub here), written with
``Dataset.to_parquet`` as the script writes it."""

from __future__ import annotations

import re
from pathlib import Path

import datasets

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'

# GSM8K's own shape: a question and a worked answer ending in "#### N".
RAW = [
    {"question": "Tom has 3 apples and buys 4 more. How many apples?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A box holds 12 eggs. How many eggs in 2 boxes?", "answer": "12 * 2 = <<12*2=24>>24\n#### 24"},
    {"question": "Sam earns $1,200 and spends $200. What is left?", "answer": "1200 - 200 = 1000\n#### 1,000"},
    {"question": "Half of 18 is what?", "answer": "18 / 2 = <<18/2=9>>9\n#### 9"},
]


def extract_solution(solution_str: str) -> str:  # veRL's, as written there
    solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
    assert solution is not None
    return solution.group(0).split("#### ")[1].replace(",", "")


def make_map_fn(split: str):
    def process_fn(example, idx):
        question_raw = example.pop("question")
        question = question_raw + " " + INSTRUCTION
        answer_raw = example.pop("answer")
        return {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": extract_solution(answer_raw)},
            "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
        }

    return process_fn


def write_gsm8k_parquet(path: Path, repeat: int = 1, split: str = "train") -> Path:
    """``RAW`` (``repeat`` times) through veRL's ``process_fn``, saved as veRL saves it."""
    raw = datasets.Dataset.from_list(RAW * repeat)
    raw.map(function=make_map_fn(split), with_indices=True).to_parquet(str(path))
    return path
