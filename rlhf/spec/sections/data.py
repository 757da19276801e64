"""``data.*``: datasets and how rows become tokens."""

from __future__ import annotations

from dataclasses import dataclass

from rlhf.spec import names
from rlhf.spec.keys import items, key


@dataclass(frozen=True)
class DataSpec:
    """Datasets and how rows become tokens (OpenRLHF data.* flags).

    The *_key settings name a column, or a dotted path into nested fields (veRL: reward_model.ground_truth,
    extra_info.question; prompt.0.content indexes a list). Left at their defaults, they are read from the columns of
    TRL's formats and veRL's parquet layout, said in one line of the data report: RL prompt (+ reward_model,
    data_source: veRL); SFT prompt + completion, messages, conversations (ShareGPT), text, or veRL's
    extra_info.question/.answer; preference prompt + chosen + rejected; KTO prompt + completion + label (or pairs,
    unpaired). Every RL column but the prompt reaches reward functions (a record's columns dict), as TRL passes them."""

    train_files: list[str] = key(
        factory=list,
        doc="json/jsonl/csv/parquet/arrow files, dataset folders, builtin:NAME, reasoning_gym:TASK?size=N&seed=S "
        "(generated; the reasoning extra) or hub org/name",
    )
    train_probs: list[float] | None = key(
        None, "mixing probabilities, one per train file (null: concatenated)", items=items(ge=0, le=1), sums_to=1.0
    )
    train_split: str = key("train", "split of the train datasets", nonempty=True)
    eval_files: list[str] = key(factory=list, doc="evaluation datasets (same forms as train_files)")
    eval_split: str = key("train", "split of the eval datasets", nonempty=True)
    eval_fraction: float = key(0.0, "hold out this fraction of train when no eval files are given", ge=0, lt=1)
    input_key: str = key(
        "input",
        "column of the prompt (or SFT input): a string or a chat message list; dotted for a nested field; where the "
        "rows lack it, read from TRL's/veRL's columns (prompt, messages, conversations, text, extra_info.question)",
        nonempty=True,
    )
    output_key: str | None = key(None, "SFT: column of the response (null: read from TRL's completion column)")
    prompt_key: str | None = key(None, "preference data: column of a shared prompt (null: TRL's prompt column)")
    chosen_key: str = key("chosen", "preference data: column of the chosen response", nonempty=True)
    rejected_key: str = key("rejected", "preference data: column of the rejected response", nonempty=True)
    label_key: str | None = key(
        None,
        "RL: column passed to the reward as the label (answer), dotted for a nested field (veRL: "
        "reward_model.ground_truth, read so from veRL's columns when null); a struct is refused naming its keys; "
        "KTO: the desirable flag (null: TRL's label column)",
    )
    margin_key: str | None = key(None, "RM: column of the pair's margin")
    datasource_key: str = key(
        "datasource",
        "column naming a row's source (eval metrics per source); where the rows lack it, veRL's data_source",
        nonempty=True,
    )
    input_template: str | None = key(None, 'e.g. "User: {}\\nAssistant: "; {} is the input', contains="{}")
    apply_chat_template: bool = key(
        True,
        "render inputs with the tokenizer's chat template, a string as the user's turn; false: a string is used as it "
        "is (TRL's standard format), while an RL prompt given as a message list is still rendered with the template "
        "(TRL's rule: the data's format decides)",
    )
    max_len: int = key(2048, "prompt + response tokens", ge=2)
    max_prompt_len: int | None = key(None, "prompt tokens at most (null: max_len - rollout.max_new_tokens)", ge=1)
    max_samples: int | None = key(None, "use at most this many rows per dataset (null: all)", ge=1)
    on_bad_row: str = key(
        "error", "error: stop naming file, row and key | skip: count and report", choices=names.BAD_ROW_POLICIES
    )
    on_too_long: str = key(
        "truncate", "rows longer than max_len: truncate, or drop (counted)", choices=names.TOO_LONG_POLICIES
    )
    packing: bool = key(
        False, "SFT: pack several samples into each dataset row of data.max_len (a row is then one sample of the batch)"
    )
    multiturn: bool = key(False, "SFT: loss on every assistant turn")
    pretrain_mode: bool = key(False, "SFT: loss on all tokens")
