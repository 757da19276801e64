"""On-policy distillation in the spec: the teacher role exists only for opd, is placed like the reference and counted
in the plan's memory, and validation names a missing teacher, a teacher's other tokenizer, and a misplaced one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhf.planning.plan import plan
from rlhf.spec import validate
from rlhf.spec.build import load_spec
from rlhf.spec.derive import derive
from rlhf.spec.required import MissingValues
from rlhf.spec.tokenizer_files import tokenizer_difference

OPD = ["+recipe=opd_tiny_cpu"]


def errors(overrides: list[str]) -> dict[str, str]:
    return {e.key: str(e) for e in validate(load_spec(overrides))}


def save_byte_tokenizer(folder: Path, extra_tokens: tuple[str, ...] = ()) -> Path:
    from rlhf.models.tokenizer import byte_level_tokenizer

    tok = byte_level_tokenizer()
    if extra_tokens:
        tok.add_special_tokens({"additional_special_tokens": list(extra_tokens)})
    tok.save_pretrained(folder)
    (folder / "config.json").write_text("{}")  # a model folder as validation sees one (nothing is loaded)
    (folder / "model.safetensors").write_bytes(b"")
    return folder


@pytest.fixture
def teacher_dir(tmp_path: Path) -> Path:
    return save_byte_tokenizer(tmp_path / "teacher")


def test_opd_preset_picks_the_teacher_estimator_without_a_reference() -> None:
    a = load_spec(["algorithm=opd"]).algorithm
    assert (a.advantage.estimator, a.advantage.gamma, a.advantage.no_std_norm, a.kl.coef) == ("opd", 0.0, True, 0.0)


def test_teacher_role_exists_only_for_opd(teacher_dir: Path) -> None:
    assert "teacher" in derive(load_spec(OPD + [f"teacher.model_path={teacher_dir}"])).roles
    assert "teacher" not in derive(load_spec(["+recipe=grpo_tiny_cpu"])).roles
    assert "teacher" not in derive(load_spec(["+recipe=ppo_tiny_cpu"])).roles


def test_missing_teacher_path_is_named_with_the_fix() -> None:
    with pytest.raises(MissingValues, match="teacher.model_path"):  # the recipe leaves it to the command line
        load_spec(OPD)
    errs = errors(OPD + ["teacher.model_path="])
    assert list(errs) == ["teacher.model_path"]
    assert "sft_tiny_cpu" in errs["teacher.model_path"]


def test_teacher_path_that_does_not_exist_is_named(tmp_path: Path) -> None:
    assert "no such file or folder" in errors(OPD + [f"teacher.model_path={tmp_path / 'nope'}"])["teacher.model_path"]


def test_a_teacher_without_opd_is_refused(teacher_dir: Path) -> None:
    errs = errors(["+recipe=grpo_tiny_cpu", f"teacher.model_path={teacher_dir}"])
    assert list(errs) == ["teacher.model_path"] and "algorithm=opd" in errs["teacher.model_path"]


def test_teacher_with_another_tokenizer_is_named(tmp_path: Path) -> None:
    student = save_byte_tokenizer(tmp_path / "student")
    other = save_byte_tokenizer(tmp_path / "other", extra_tokens=("<|tool|>",))
    errs = errors(OPD + ["model.make_local=false", f"model.path={student}", f"teacher.model_path={other}"])
    assert list(errs) == ["teacher.model_path"]
    assert "share the student's tokenizer" in errs["teacher.model_path"]
    assert "262 vs 263 tokens" in errs["teacher.model_path"]


def test_teacher_with_the_students_tokenizer_passes(tmp_path: Path, teacher_dir: Path) -> None:
    student = save_byte_tokenizer(tmp_path / "student")
    assert errors(OPD + ["model.make_local=false", f"model.path={student}", f"teacher.model_path={teacher_dir}"]) == {}


def test_opd_needs_no_reward_source_unless_it_evaluates(teacher_dir: Path) -> None:
    base = OPD + [f"teacher.model_path={teacher_dir}", "reward.verifier="]
    assert errors(base + ["eval.steps=0"]) == {}
    assert list(errors(base)) == ["eval.steps"]  # the recipe evaluates every 10 steps: pass@k needs a verifier


def test_opd_takes_at_most_one_reward_source(teacher_dir: Path, tmp_path: Path) -> None:
    fn = tmp_path / "r.py"
    fn.write_text("def reward_func(queries, prompts, labels):\n    return [0.0] * len(queries)\n")
    assert "reward" in errors(OPD + [f"teacher.model_path={teacher_dir}", f"reward.function={fn}"])


@pytest.mark.parametrize(
    ("placement", "policy_group"),
    [
        ("colocate_all", ("policy", "teacher", "rollout")),
        ("colocate_actor_ref", ("policy", "teacher")),
        ("split", ("policy",)),
    ],
)
def test_shipped_placements_place_the_teacher_like_the_reference(
    teacher_dir: Path, placement: str, policy_group: tuple[str, ...]
) -> None:
    over = OPD + [f"teacher.model_path={teacher_dir}", f"placement={placement}"]
    if placement != "colocate_all":
        over += ["hardware.devices_per_node=3"]
    d = derive(load_spec(over))
    assert d.group_of("policy") == policy_group
    if placement == "split":
        assert d.group_of("teacher") == ("teacher",)


def test_plan_counts_the_frozen_teacher_like_the_reference(teacher_dir: Path) -> None:
    spec = load_spec(OPD + [f"teacher.model_path={teacher_dir}"])
    teacher = plan(spec).memory[0].per_role["teacher"]
    params = plan(spec).params
    assert teacher.weights == params * 4  # fp32 on CPU, the student's size by default
    big = plan(load_spec(OPD + [f"teacher.model_path={teacher_dir}", "teacher.params_b=0.5"])).memory[0]
    assert big.per_role["teacher"].weights == 0.5e9 * 4
    off = plan(load_spec(OPD + [f"teacher.model_path={teacher_dir}", "teacher.offload=true"])).memory[0]
    assert (off.per_role["teacher"].weights, off.per_role["teacher"].host) == (0.0, params * 4)


def write_tokenizer_json(folder: Path, vocab: dict[str, int], merges: list, added: list[dict] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"model": {"type": "BPE", "vocab": vocab, "merges": merges}, "added_tokens": added or []}
    (folder / "tokenizer.json").write_text(json.dumps(body))
    return folder


def test_same_vocabulary_with_other_merges_is_a_difference(tmp_path: Path) -> None:
    vocab = {"a": 0, "b": 1, "ab": 2}
    a = write_tokenizer_json(tmp_path / "a", vocab, [["a", "b"]])
    b = write_tokenizer_json(tmp_path / "b", vocab, [])
    assert "merge rules differ" in tokenizer_difference(a, b)


def test_merges_written_as_strings_or_pairs_are_the_same_rules(tmp_path: Path) -> None:
    vocab = {"a": 0, "b": 1, "ab": 2}
    pairs = write_tokenizer_json(tmp_path / "pairs", vocab, [["a", "b"]])
    old = tmp_path / "old"
    old.mkdir()
    (old / "vocab.json").write_text(json.dumps(vocab))
    (old / "merges.txt").write_text("#version: 0.2\na b\n")
    assert tokenizer_difference(pairs, old) is None


def test_a_token_moved_to_another_id_is_named(tmp_path: Path) -> None:
    a = write_tokenizer_json(tmp_path / "a", {"a": 0, "b": 1}, [])
    b = write_tokenizer_json(tmp_path / "b", {"b": 0, "a": 1}, [])
    assert tokenizer_difference(a, b) == "their vocabularies differ (both 2 tokens; id 0 is 'a' vs 'b')"


def test_folders_without_tokenizer_files_are_left_to_the_load_check(tmp_path: Path) -> None:
    a = write_tokenizer_json(tmp_path / "a", {"a": 0}, [])
    (tmp_path / "empty").mkdir()
    assert tokenizer_difference(a, tmp_path / "empty") is None
