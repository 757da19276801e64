"""A built dataset: the tokenised rows (a Hugging Face Dataset) and the report of how they were built."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from datasets import Dataset

from rlhf.data.report import DataReport


@dataclass
class TokenizedDataset:
    """Indexable like a list of dicts (``ds[i]``), so a sampler/loader can read it directly.

    ``kind`` is prompt | sft | preference | kto; the columns per kind are documented by its builder.
    """

    data: Dataset
    report: DataReport
    kind: str

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.data[int(i)]

    def rows(self, indices: list[int]) -> list[dict[str, Any]]:
        """Several rows at once (one Arrow read instead of one per row)."""
        batch = self.data[list(map(int, indices))]
        return [{k: batch[k][j] for k in batch} for j in range(len(indices))]
