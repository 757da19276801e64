"""hydra/launcher=ray_cluster on a simulated two-node Ray cluster: a 3-job sweep of a user's recipes (a -cd folder)
with max_concurrent=2, two jobs needing different resources and a third that waits for a slot. From the jobs' own
records: two ran at the same time, never more than two, each got the bundles of its own plan (reserved by the
launcher, adopted by the job), a failing job left the others finished, and the summary lists every job. A job that
can never fit is refused before any starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ceilings import ceiling

from rlhf.spec.store import find_recipes

pytestmark = [pytest.mark.slow, pytest.mark.ray]

QUIET = {
    "trainer": {"max_steps": 2, "global_batch": 16, "micro_batch_per_device": 16},
    "rollout": {"prompts_per_step": 4, "samples_per_prompt": 4, "max_new_tokens": 4, "micro_batch_per_device": 16},
    "algorithm": {"kl": {"coef": 0.0}},
    "eval": {"steps": 2, "max_prompts": 4, "samples_per_prompt": 2},
    "logging": {"progress": False},
}
JOBS = {
    # one bundle of 2 CPUs: a whole worker node
    "a_one_bundle": {"hardware": {"cpus_per_node": 2}},
    # two data-parallel ranks, two engines: two bundles of 1 CPU
    "b_two_bundles": {
        "hardware": {"devices_per_node": 2, "cpus_per_node": 2},
        "rollout": {"num_engines": 2},
        "trainer": {"micro_batch_per_device": 8},
    },
    # passes validation (the folder has the files it looks for), fails when the job loads it; the third job: it waits
    # for one of the first two to end (max_concurrent=2), so a third job that trains would prove nothing more
    "c_no_model_there": {"model": {"make_local": False, "path": "EMPTY"}},
}


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def write_recipes(conf: Path, empty_model: Path) -> None:
    base = yaml.safe_load(find_recipes()["grpo_tiny_cpu"].path.read_text())
    (conf / "recipe").mkdir(parents=True)
    for name, extra in JOBS.items():
        body = _merge(_merge(base, QUIET), extra)
        if "model" in extra:
            body["model"]["path"] = str(empty_model)
        text = f"# @package _global_\n# sweep test job {name}\n" + yaml.safe_dump(body, sort_keys=False)
        (conf / "recipe" / f"{name}.yaml").write_text(text)


def run_on_two_nodes(workdir: Path, *commands: list[str]) -> dict:
    script = Path(__file__).with_name("two_node_sweep.py")
    proc = subprocess.run(
        [sys.executable, str(script), str(workdir), json.dumps(list(commands))],
        capture_output=True,
        text=True,
        timeout=ceiling(1500),
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_sweep_jobs_run_side_by_side_each_with_its_plans_bundles(tmp_path):
    empty = tmp_path / "empty_model"  # its files pass validation (which loads nothing); empty ones fail the load
    empty.mkdir()
    (empty / "config.json").write_text('{"model_type": "llama"}')
    (empty / "model.safetensors").write_bytes(b"")
    (empty / "tokenizer.json").write_text("{}")
    write_recipes(tmp_path / "conf", empty)
    never = ["-m", "hydra/launcher=ray_cluster", "+recipe=a_one_bundle", "-cd", "conf", "hardware.cpus_per_node=2,8"]
    sweep = [
        "-m",
        "hydra/launcher=ray_cluster",
        "hydra.launcher.max_concurrent=2",
        "-cd",
        "conf",
        "+recipe=" + ",".join(JOBS),
        "hydra.sweep.dir=multirun/four",
    ]
    out = run_on_two_nodes(tmp_path, never, sweep)
    refused, swept = out["runs"]

    # the job that needs a bundle of 8 CPUs is refused before anything starts
    assert refused["rc"] != 0 and "1 job(s) can never fit this Ray cluster" in refused["stderr"], refused["stderr"]
    assert "hardware.cpus_per_node=8" in refused["stderr"] and "Traceback" not in refused["stderr"]
    assert not list(tmp_path.glob("multirun/a_one_bundle/*/*/job.json"))

    # the failing job makes the sweep's exit code non-zero, after every job ran
    assert swept["rc"] != 0, swept["stdout"][-2000:] + swept["stderr"][-2000:]
    sweep_dir = tmp_path / "multirun" / "four"
    jobs = {}
    for num in range(3):
        d = sweep_dir / str(num)
        jobs[num] = {
            "record": json.loads((d / "job.json").read_text()),
            "plan": json.loads((d / "plan.json").read_text()) if (d / "plan.json").is_file() else None,
            "placement": json.loads((d / "placement.json").read_text())["reserved"],
            "log": (d / "run.log").read_text(),
        }
    a, b, c = (jobs[i]["record"] for i in range(3))
    errors = "\n".join(str(r["error"])[-1500:] for r in (a, b, c))
    assert [r["status"] for r in (a, b, c)] == ["completed", "completed", "failed"], errors
    assert "tokenizer" in c["error"]  # the job loading the empty folder failed; a and b finished
    assert all(r["objective"] is not None for r in (a, b))

    # two ran at the same time (a and b), and never more than max_concurrent
    assert max(a["started"], b["started"]) < min(a["finished"], b["finished"])
    spans = [(r["started"], r["finished"]) for r in (a, b, c)]
    for t, _ in spans:
        assert sum(s <= t < f for s, f in spans) <= 2

    # each got the bundles of its own plan, on the worker nodes, and used what the launcher reserved
    for num in range(2):
        plan, reserved = jobs[num]["plan"], jobs[num]["placement"]
        planned = [[g["bundle"]] * len(g["nodes"]) for g in plan["groups"]]
        assert [p["bundles"] for p in reserved] == planned
        assert all(n in out["worker_nodes"] for p in reserved for n in p["nodes"])
        assert all(f"placement group {p['name']} reserved by the launcher" in jobs[num]["log"] for p in reserved)
    assert [p["bundles"] for p in jobs[0]["placement"]] == [[{"CPU": 2.0}]]
    assert [p["bundles"] for p in jobs[1]["placement"]] == [[{"CPU": 1.0}, {"CPU": 1.0}]]

    summary = json.loads((sweep_dir / "sweep_summary.json").read_text())["jobs"]
    assert [(j["num"], j["status"]) for j in summary] == [
        (0, "completed"),
        (1, "completed"),
        (2, "failed"),
    ]
    assert all(j["seconds"] > 0 for j in summary) and summary[0]["objective"] == a["objective"]
    assert "sweep summary (2 of 3 completed" in swept["stderr"] + swept["stdout"]
