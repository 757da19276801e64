"""The example agents train through the whole RL pipeline on the local executor: the hf rollout engine, DeepSpeed,
the shipped agent recipes, GRPO and REINFORCE++-baseline. The OpenAI agent's chat calls go over real HTTP on 127.0.0.1.

Each run records what ``make_experience`` received (a spy in this process, where the driver runs the agent), so the
tests check the samples themselves: rewards are the agent's, environment/tool tokens sit in the trajectory with
action_mask 0 and log-prob 0, and the experience batch the trainer learns from carries the same mask.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlhf.launch.job import run as run_pipeline
from rlhf.pipelines import rl
from rlhf.planning.plan import plan
from rlhf.spec.build import load_spec
from rlhf.tracking.tracker import read_metrics

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STEPS = 2
SMALL = [  # 4 prompts x 4 samples per step, one optimizer step per rollout
    f"trainer.max_steps={STEPS}",
    "rollout.prompts_per_step=4",
    "rollout.samples_per_prompt=4",
    "trainer.global_batch=16",
    "trainer.micro_batch_per_device=8",
    "logging.mlflow=false",
    "logging.progress=false",
]
ARITH_FEEDBACK = "\n<|user|>\nwrong, try again<|end|>\n<|assistant|>\n"
ARITH_REWARDS = {0.0, 0.1, 1.0, 1 / 2, 1 / 3}  # arith_env.py: 1/attempt when right, 0.1 for a wrong number
CALC_REWARDS = {0.0, 0.1, 0.2, 1.0}  # calculator_openai.py


@pytest.fixture
def examples_env(monkeypatch):
    """The agent recipes find examples/ through RLHF_EXAMPLES, so these tests run from any directory."""
    monkeypatch.setenv("RLHF_EXAMPLES", str(EXAMPLES))


@pytest.fixture
def recorded(monkeypatch):
    """Every step's (scored samples, experience action mask) as the pipeline passes them to make_experience."""
    steps: list[dict] = []
    original = rl.make_experience

    def spy(spec, workers, scored, pad_id, kl_coef):
        exp, metrics = original(spec, workers, scored, pad_id, kl_coef)
        steps.append({"scored": scored, "action_mask": exp.action_mask.clone(), "metrics": dict(metrics)})
        return exp, metrics

    monkeypatch.setattr(rl, "make_experience", spy)
    return steps


def train(recipe: str, algorithm: str, run_dir: Path, *overrides: str):
    spec = load_spec([f"+recipe={recipe}", f"algorithm={algorithm}", *SMALL, *overrides])
    result = run_pipeline(spec, plan(spec), run_dir)
    return spec, result, read_metrics(run_dir)


def policy_tokenizer(spec):
    from rlhf.models.loading import resolve_model_path, tokenizer_for

    return tokenizer_for(spec.model, resolve_model_path(spec.model))


def masked_segments(rollout) -> list[list[int]]:
    """The runs of output tokens with action_mask 0 (environment feedback, tool results, chat markers)."""
    segments: list[list[int]] = []
    for i, (token, mask) in enumerate(zip(rollout.output_ids, rollout.action_mask, strict=True)):
        if mask:
            continue
        if i == 0 or rollout.action_mask[i - 1]:
            segments.append([])
        segments[-1].append(token)
    return segments


def action_ranges(rollout) -> int:
    m = rollout.action_mask
    return sum(1 for i, x in enumerate(m) if x and (i == 0 or not m[i - 1]))


def assert_trained(metrics: list[dict], steps: list[dict]) -> None:
    """Both steps logged with a finite policy loss; the trainer's log-probs match the sampled tokens'."""
    assert [int(m["step"]) for m in metrics if "train/policy_loss" in m] == list(range(1, STEPS + 1))
    assert len(steps) == STEPS
    for m in metrics:
        assert math.isfinite(m["train/policy_loss"]) and math.isfinite(m["train/actor_grad_norm"])
        # Recomputed by the policy on the very tokens the engine sampled (none decoded and re-encoded).
        assert m["train/logprobs_diff"] < 1e-3


def assert_agent_rewards_and_masks(steps: list[dict], allowed_rewards: set[float]) -> None:
    for step in steps:
        scored, exp_mask = step["scored"], step["action_mask"]
        assert len(scored.rollouts) == 16
        assert scored.rewards == [r.reward for r in scored.rollouts]  # the agent's, no other source
        assert all(any(math.isclose(r, a) for a in allowed_rewards) for r in scored.rewards), scored.rewards
        for i, r in enumerate(scored.rollouts):
            assert action_ranges(r) == r.extra["turns"]
            assert all(lp == 0.0 for lp, m in zip(r.logprobs, r.action_mask, strict=True) if not m)
            # The experience row carries the same mask: output token j is predicted at position p + j - 1.
            p, n = len(r.prompt_ids), len(r.output_ids)
            assert exp_mask[i, p - 1 : p - 1 + n].tolist() == [float(m) for m in r.action_mask]
            assert exp_mask[i].sum().item() == sum(r.action_mask)
        lengths = [float(sum(r.action_mask)) for r in scored.rollouts]
        assert step["metrics"]["response_length"] == pytest.approx(sum(lengths) / len(lengths))


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp_baseline"])
def test_arith_environment_trains_with_feedback_masked_out(algorithm, examples_env, recorded, tmp_path):
    spec, result, metrics = train("agent_arith_tiny_cpu", algorithm, tmp_path / "run")
    assert (spec.agent.path, spec.agent.executor) == (str(EXAMPLES / "agents" / "arith_env.py"), "multi_turn")
    assert result["steps"] == STEPS
    assert_trained(metrics, recorded)
    assert_agent_rewards_and_masks(recorded, ARITH_REWARDS)
    tok = policy_tokenizer(spec)
    feedback = tok(ARITH_FEEDBACK, add_special_tokens=False)["input_ids"]
    rollouts = [r for step in recorded for r in step["scored"].rollouts]
    multi = [r for r in rollouts if r.extra["turns"] > 1]
    assert multi, "a random tiny model should miss the first attempt somewhere"
    for r in rollouts:
        logs = r.extra["extra_logs"]
        assert logs["attempts"] == r.extra["turns"]
        # Every masked run of tokens is the environment's feedback, tokenised on its own (possibly after the
        # "<|end|>" the environment adds when a turn stopped at max_new_tokens).
        segments = masked_segments(r)
        assert len(segments) == r.extra["turns"] - 1
        for seg in segments:
            assert seg[-len(feedback) :] == feedback
            assert tok.decode(seg[: -len(feedback)]) in ("", "<|end|>")
    for m in metrics:  # the environment's extra_logs reach the metrics
        assert 1.0 <= m["train/attempts"] <= 3.0 and 0.0 <= m["train/correct"] <= 1.0
    assert any(m["train/attempts"] > 1.0 for m in metrics)
    # response_length counts action tokens only: below the output length whenever there was feedback.
    multi_step = [s for s in recorded if any(r.extra["turns"] > 1 for r in s["scored"].rollouts)]
    for s in multi_step:
        outputs = [len(r.output_ids) for r in s["scored"].rollouts]
        assert s["metrics"]["response_length"] < sum(outputs) / len(outputs)


@pytest.mark.parametrize("algorithm", ["grpo", "reinforce_pp_baseline"])
def test_calculator_agent_trains_through_the_openai_server(algorithm, examples_env, recorded, tmp_path):
    spec, result, metrics = train("agent_calculator_tiny_cpu", algorithm, tmp_path / "run")
    assert spec.agent.path == str(EXAMPLES / "agents" / "calculator_openai.py")
    assert spec.agent.executor == "openai" and not spec.data.apply_chat_template
    assert result["steps"] == STEPS
    assert_trained(metrics, recorded)
    assert_agent_rewards_and_masks(recorded, CALC_REWARDS)
    tok = policy_tokenizer(spec)
    for step in recorded:
        for row, r in zip(step["scored"].rows, step["scored"].rollouts, strict=True):
            # The raw question went to run_agent; the server applied the chat template to its message.
            chat = [{"role": "user", "content": row["prompt"]}]
            expected = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
            assert r.prompt_ids == tok(expected, add_special_tokens=False)["input_ids"]
            assert r.extra["turns"] == r.extra["extra_logs"]["tool_calls"] + 1
            for seg in masked_segments(r):
                assert "calc: " in tok.decode(seg)
    for m in metrics:
        assert {"train/tool_calls", "train/correct"} <= set(m)


TWO_CALLS = '''
async def run_agent(prompt, label, session):
    """Always two chat calls with a tool result between them (a random model never writes calc(...) itself)."""
    client = session.client()
    messages = [{"role": "user", "content": prompt}]
    first = await client.chat.completions.create(model=session.model, messages=messages)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": "calc: " + label}]
    second = await client.chat.completions.create(model=session.model, messages=messages)
    text = second.choices[0].message.content or ""
    return {"reward": float(text.strip().startswith(label)) + 0.1 * text.count(label), "extra_logs": {"calls": 2}}
'''


def test_openai_agent_episodes_of_several_calls_train_with_tool_results_masked(
    examples_env, recorded, tmp_path
):
    agent = tmp_path / "two_calls.py"
    agent.write_text(TWO_CALLS)
    spec, _, metrics = train("agent_calculator_tiny_cpu", "grpo", tmp_path / "run", f"agent.path={agent}")
    assert_trained(metrics, recorded)
    tok = policy_tokenizer(spec)
    for step in recorded:
        for row, r in zip(step["scored"].rows, step["scored"].rollouts, strict=True):
            assert r.extra["turns"] == 2 and action_ranges(r) == 2
            [tool] = masked_segments(r)  # between the calls: end of reply, the tool's user turn, the next prompt
            assert f"<|user|>\ncalc: {row['label']}<|end|>" in tok.decode(tool)
    assert all(m["train/calls"] == 2.0 for m in metrics)
