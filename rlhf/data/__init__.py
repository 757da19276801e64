"""Datasets on Hugging Face ``datasets``: loading and mixing rows, tokenising prompt/SFT/preference data,
padding into batches, and a resumable order.

    rows = load_rows(["builtin:arith"])                       # any files, with _source/_row per row
    splits = build_datasets(spec, tokenizer)                   # train/eval TokenizedDataset + DataReport
    loader = StatefulLoader(splits.train, 16, partial(collate_prompts, pad_id=pad_token_id(tok)), seed=spec.seed)
"""

from rlhf.data.build import BUILDERS, DataSplits, build_datasets, data_kind, load_split_rows
from rlhf.data.collate import (
    COLLATORS,
    collate_kto,
    collate_preference,
    collate_prompts,
    collate_sft,
    pad,
    pad_token_id,
)
from rlhf.data.errors import DataError
from rlhf.data.loading import builtin_path, load_rows, load_source, split_eval
from rlhf.data.packing import block_causal_mask, pack_samples
from rlhf.data.preference import build_kto, build_preference
from rlhf.data.prompts import build_prompts, max_prompt_len
from rlhf.data.report import DataReport
from rlhf.data.sampler import ResumableSampler, StatefulLoader
from rlhf.data.sft import build_sft
from rlhf.data.tokenized import TokenizedDataset

__all__ = [
    "BUILDERS",
    "COLLATORS",
    "DataError",
    "DataReport",
    "DataSplits",
    "ResumableSampler",
    "StatefulLoader",
    "TokenizedDataset",
    "block_causal_mask",
    "build_datasets",
    "build_kto",
    "build_preference",
    "build_prompts",
    "build_sft",
    "builtin_path",
    "collate_kto",
    "collate_preference",
    "collate_prompts",
    "collate_sft",
    "data_kind",
    "load_rows",
    "load_source",
    "load_split_rows",
    "max_prompt_len",
    "pack_samples",
    "pad",
    "pad_token_id",
    "split_eval",
]
