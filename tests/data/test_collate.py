"""Padding to the batch maximum: left for prompts, right for training sequences; masks line up with log-probs."""

from __future__ import annotations

import torch

from rlhf.data import collate_kto, collate_preference, collate_prompts, collate_sft, pad

PAD = 0


def test_pad_sides_and_minimum_length():
    assert pad([[1, 2], [3]], PAD, "right").tolist() == [[1, 2], [3, 0]]
    assert pad([[1, 2], [3]], PAD, "left").tolist() == [[1, 2], [0, 3]]
    assert pad([[1]], PAD, "right", length=3).tolist() == [[1, 0, 0]]


def test_prompts_are_left_padded_with_their_metadata():
    rows = [
        {"prompt_ids": [5, 6, 7], "prompt": "a", "label": "1", "datasource": "x"},
        {"prompt_ids": [8], "prompt": "b", "label": "2", "datasource": "y"},
    ]
    b = collate_prompts(rows, PAD)
    assert b["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1]]
    assert b["label"] == ["1", "2"] and b["prompt_ids"] == [[5, 6, 7], [8]]


def test_sft_batch_is_right_padded_and_action_mask_is_shifted():
    rows = [{"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}, {"input_ids": [8, 9], "loss_mask": [0, 1]}]
    b = collate_sft(rows, PAD)
    assert b["input_ids"].tolist() == [[5, 6, 7], [8, 9, 0]]
    assert b["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert b["action_mask"].tolist() == [[1, 1], [1, 0]]  # pairs with log p(input_ids[:, 1:])
    assert b["input_ids"].dtype == torch.long and "segment_ids" not in b


def test_packed_sft_rows_bring_positions_and_segments():
    rows = [{"input_ids": [5, 6, 7], "loss_mask": [0, 1, 0], "position_ids": [0, 1, 0], "segment_ids": [1, 1, 2]}]
    b = collate_sft(rows + [{"input_ids": [8], "loss_mask": [0], "position_ids": [0], "segment_ids": [1]}], PAD)
    assert b["segment_ids"].tolist() == [[1, 1, 2], [1, 0, 0]]
    assert b["position_ids"].tolist() == [[0, 1, 0], [0, 0, 0]]


def test_preference_halves_share_one_width_for_a_single_forward():
    rows = [
        {
            "chosen_ids": [1, 2, 3],
            "chosen_mask": [0, 0, 1],
            "rejected_ids": [1, 2, 3, 4, 5],
            "rejected_mask": [0, 0, 1, 1, 1],
            "prompt_len": 2,
            "margin": 0.5,
        }
    ]
    b = collate_preference(rows, PAD)
    assert b["chosen_input_ids"].shape == b["rejected_input_ids"].shape == (1, 5)
    assert b["chosen_loss_mask"].tolist() == [[0, 0, 1, 0, 0]]
    assert b["prompt_len"].tolist() == [2] and b["margin"].tolist() == [0.5]
    left = collate_preference(rows, PAD, side="left")
    assert left["chosen_input_ids"].tolist() == [[0, 0, 1, 2, 3]]


def test_kto_batch_adds_mismatched_pairs_for_the_kl_term():
    rows = [
        {"prompt_ids": [1, 2], "response_ids": [3], "desirable": True},
        {"prompt_ids": [4], "response_ids": [5, 6], "desirable": False},
    ]
    b = collate_kto(rows, PAD)
    assert b["input_ids"].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert b["kl_input_ids"].tolist() == [[1, 2, 5, 6], [4, 3, 0, 0]]
    assert b["kl_loss_mask"].tolist() == [[0, 0, 1, 1], [0, 1, 0, 0]]
    assert b["desirable"].tolist() == [True, False]
