"""Calibrate the cost model of ``rlhf-plan --auto`` (rlhf/planning/cost.py) on this CPU: measured step times of a small
grid of layouts, run with the project's own sweeps (``rlhf-run -m``), beside the model's estimates; the rank
correlation, the ratio, and how the layout ``--auto`` picks compares with the best measured one.

    .venv/bin/python bench/calibrate_cost.py                      # both models, 2 repeats: about 45 min here
    .venv/bin/python bench/calibrate_cost.py --models tiny --repeats 3 --out runs/calib
    .venv/bin/python bench/calibrate_cost.py --report runs/calib  # the table again from a finished run (and with
                                                                  # the model as it is now)

The grid (per model; hardware=cpu with devices_per_node=2: two slots of one core each):
    placement      colocate_all (policy, reference and an engine on each slot: 2 ranks, 2 engines) or
                   colocate_actor_ref (policy + reference on one slot, one engine on the other)
    micro-batch    trainer.micro_batch_per_device, two values (rollout.micro_batch_per_device follows as --auto
                   derives it)
    engine         deepspeed ZeRO-2, ZeRO-3 (tiny only), fsdp2
plus the layout ``--auto`` picks when it is not a grid point. Each point is one ``+layout=NAME`` option of a config
folder the script writes (``-cd``), so one sweep runs them all: ``logging.run_name=rep1,rep2 +layout=...``, the
repeats outermost, so every repeat passes over every point before the next starts (points alternate, and load
that comes and goes spreads over all of them). A point's step time is the 20% quantile (QUANTILE) of
``train/timing/step_total`` over its steps after the first (start-up and warm-up excluded), every repeat's steps
pooled: the machine is shared, contention only ever adds time, so the fast end of a point's steps is its least
disturbed time (what the cost model's constants, probed as best times, estimate); a low quantile rather than the
minimum, which keeps falling as steps are added and rests on one step. The table also shows the minimum, the median,
the steps pooled and the machine's load average while the point ran (sampled every 10 s); ``--phases`` adds each
timed phase beside the model's. The verdict is for the layout --auto picked before the sweep started (written to
auto.json then), so a model changed after the sweep cannot pass it by choosing the best measured point.

    --steps N      trainer.max_steps of every run (more steps per point: a steadier quantile, at ~1 s a step)
    --only A,B     run only these grid points (a cut grid), plus --auto's pick
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMON = [
    "+recipe=grpo_tiny_cpu", "hardware.devices_per_node=2", "eval.steps=0", "logging.trackers=[]",
    "logging.progress=false", "checkpoint.save_steps=0", "checkpoint.every_minutes=null",
]
MODELS: dict[str, dict[str, Any]] = {
    "tiny": {
        "overrides": COMMON + [
            "rollout.prompts_per_step=16", "rollout.samples_per_prompt=8", "rollout.max_new_tokens=8",
            "rollout.min_new_tokens=8", "data.max_len=40", "trainer.global_batch=64", "trainer.max_steps=6",
        ],
        "micro": (8, 32),
        "engines": ("zero2", "zero3", "fsdp2"),
    },
    "small": {
        "overrides": COMMON + [
            "model=small", "rollout.prompts_per_step=8", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=16",
            "rollout.min_new_tokens=16", "data.max_len=48", "trainer.global_batch=32", "trainer.max_steps=4",
        ],
        "micro": (4, 16),
        "engines": ("zero2", "fsdp2"),
    },
}
ENGINES = {
    "zero2": {"trainer.backend": "deepspeed", "trainer.zero_stage": 2},
    "zero3": {"trainer.backend": "deepspeed", "trainer.zero_stage": 3},
    "fsdp2": {"trainer.backend": "fsdp2"},
}
PLACEMENTS = ("colocate_all", "colocate_actor_ref")


def _base_spec(model: str):
    from rlhf.spec.build import load_spec

    return load_spec(MODELS[model]["overrides"])


def grid(model: str) -> list[tuple[str, dict[str, Any]]]:
    """(name, values) of every grid point, in the form --auto's candidates take (rlhf.planning.auto)."""
    from rlhf.planning.auto import _placements, _with_derived, with_values

    base = _base_spec(model)
    placements = {}
    for values in _placements(base):
        name = values["placement.name"]
        if name in PLACEMENTS and name not in placements and values.get("rollout.tensor_parallel_size", 1) == 1:
            placements[name] = values
    out = []
    for pname in PLACEMENTS:
        for micro in MODELS[model]["micro"]:
            for ename in MODELS[model]["engines"]:
                values = {**placements[pname], **ENGINES[ename], "trainer.micro_batch_per_device": micro}
                _, values = _with_derived(with_values(base, values), values)
                out.append((f"{pname}-mb{micro}-{ename}", values))
    return out


def estimate_point(model: str, values: dict[str, Any]) -> dict[str, Any]:
    from rlhf.planning.auto import with_values
    from rlhf.planning.cost import estimate
    from rlhf.planning.plan import plan
    from rlhf.spec.validate import validate

    spec = with_values(_base_spec(model), values)
    errors = validate(spec)
    p = plan(spec)
    e = estimate(spec, p)
    return {"seconds": e.total, "phases": e.phases, "fits": p.fits, "errors": [str(x) for x in errors]}


def auto_pick(model: str) -> dict[str, Any]:
    from rlhf.planning.auto import search

    result = search(_base_spec(model), top=1)
    return result.ranked[0].values


def _same(a: dict[str, Any], b: dict[str, Any], model: str) -> bool:
    from rlhf.planning.auto import with_values

    base = _base_spec(model)
    return with_values(base, a) == with_values(base, b)


def _layout_yaml(values: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    tree: dict[str, Any] = {}
    for key, value in values.items():
        *path, last = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return "# @package _global_\n" + OmegaConf.to_yaml(OmegaConf.create(tree))


class LoadSampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), os.getloadavg()[0]))
            self.stop.wait(10)

    def between(self, t0: float, t1: float) -> float | None:
        inside = [load for t, load in self.samples if t0 <= t <= t1]
        return statistics.mean(inside) if inside else None


def run_model(model: str, out: Path, repeats: int, points: list[tuple[str, dict[str, Any]]]) -> None:
    conf = out / model / "conf"
    (conf / "layout").mkdir(parents=True, exist_ok=True)
    for name, values in points:
        (conf / "layout" / f"{name}.yaml").write_text(_layout_yaml(values))
    (out / model / "points.json").write_text(json.dumps(points, indent=1))
    reps = ",".join(f"rep{i + 1}" for i in range(repeats))
    cmd = [
        str(ROOT / ".venv/bin/rlhf-run"), "-m", "-cd", str(conf), *MODELS[model]["overrides"],
        f"logging.run_name={reps}", "+layout=" + ",".join(n for n, _ in points),
        f"hydra.sweep.dir={out / model / 'sweep'}",
    ]
    sampler = LoadSampler()
    sampler.start()
    log = out / model / "sweep.log"
    print(f"[{model}] {len(points)} point(s) x {repeats} repeat(s): {' '.join(cmd[1:4])} ... (log: {log})", flush=True)
    with log.open("w") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=out, check=False)
    sampler.stop.set()
    (out / model / "load.json").write_text(json.dumps(sampler.samples))
    if proc.returncode != 0:
        print(f"[{model}] the sweep exited {proc.returncode}; the table keeps the jobs that finished (see {log})")


QUANTILE = 0.2  # a point's step time: this quantile of its steps (after the first) over all its repeats
PHASES = {  # measured train/timing/* -> the cost model's phases (rlhf.planning.cost.PHASES)
    "generation": ("generation",), "make_experience": ("reward", "experience"), "ppo_train": ("train",),
    "broadcast": ("sync",),
}


def low_quantile(values: list[float], q: float = QUANTILE) -> float:
    """The ``q`` quantile of ``values`` (linear between the nearest ranks): on a shared machine contention only adds
    time, so the fast end of a point's steps is its least disturbed time, and a quantile is steadier than the
    minimum, which falls with every step added."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def measured(model: str, out: Path) -> dict[str, list[dict[str, Any]]]:
    """Per point: one entry per repeat with its steps after the first (step time and each timed phase) and the load
    while it ran."""
    samples = json.loads((out / model / "load.json").read_text()) if (out / model / "load.json").exists() else []
    found: dict[str, list[dict[str, Any]]] = {}
    for record in sorted((out / model / "sweep").glob("**/job.json")):
        job = json.loads(record.read_text())
        layout = next((o.split("=", 1)[1] for o in job["overrides"] if o.startswith("+layout=")), None)
        metrics = record.parent / "metrics.jsonl"
        if layout is None or job.get("status") != "completed" or not metrics.exists():
            continue
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        rows = [r for r in rows if "train/timing/step_total" in r]
        rows = rows[1:] or rows  # the first step warms up (allocations, first gathers)
        inside = [load for t, load in samples if job["started"] <= t <= (job["finished"] or t)]
        found.setdefault(layout, []).append({
            "steps": [r["train/timing/step_total"] for r in rows],
            "phases": {k: [r.get(f"train/timing/{k}", 0.0) for r in rows] for k in PHASES},
            "load": statistics.mean(inside) if inside else None,
        })
    return found


def spearman(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2 + 1
            i = j + 1
        return r

    rx, ry = ranks(xs), ranks(ys)
    mx, my = statistics.mean(rx), statistics.mean(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else float("nan")


def report(model: str, out: Path, phases: bool = False) -> list[str]:
    points = [(n, v) for n, v in json.loads((out / model / "points.json").read_text())]
    meas = measured(model, out)
    pick_then = json.loads((out / model / "auto.json").read_text())["name"]
    now = auto_pick(model)  # the model as it is now (--report on an older run): its pick, if it was measured
    pick = next((n for n, v in points if _same(v, now, model)), None)
    samples = json.loads((out / model / "load.json").read_text()) if (out / model / "load.json").exists() else []
    loads = [load for _, load in samples]
    q = f"q{round(QUANTILE * 100)}"
    lines = [f"{model}: {len(points)} point(s); step seconds measured ({q}: the {QUANTILE:.0%} quantile of the steps "
             f"after the first, all repeats pooled) vs estimated"]
    if loads:
        lines.append(f"  load average (1 min) while the sweep ran: {min(loads):.1f}-{max(loads):.1f}, mean "
                     f"{statistics.mean(loads):.1f}, on {os.cpu_count()} core(s)")
    lines.append(f"  {'point':<31}{q:>6}{'min':>6}{'median':>7}{'steps':>6}{'load':>5}{'estimate':>9}{'ratio':>6}")
    rows = []
    for name, values in points:
        e = estimate_point(model, values)
        reps = meas.get(name, [])
        if not reps:
            lines.append(f"  {name:<31}{'-':>6}{'':>6}{'':>7}{'':>6}{'':>5}{e['seconds']:>9.2f}")
            continue
        steps = [x for r in reps for x in r["steps"]]
        m = low_quantile(steps)
        reps_load = [r["load"] for r in reps if r["load"] is not None]
        load = f"{statistics.mean(reps_load):.0f}" if reps_load else "-"
        mark = "  <- --auto" if name == pick_then else ""
        lines.append(f"  {name:<31}{m:>6.2f}{min(steps):>6.2f}{statistics.median(steps):>7.2f}{len(steps):>6}"
                     f"{load:>5}{e['seconds']:>9.2f}{m / e['seconds']:>6.2f}{mark}")
        rows.append((name, m, e, steps, reps))
    if len(rows) >= 3:
        est = [r[2]["seconds"] for r in rows]
        rho = spearman(est, [r[1] for r in rows])
        rho_min = spearman(est, [min(r[3]) for r in rows])
        rho_med = spearman(est, [statistics.median(r[3]) for r in rows])
        ratios = [m / e["seconds"] for _, m, e, _, _ in rows]
        best = min(rows, key=lambda r: r[1])
        lines.append(f"  Spearman rank correlation {rho:.2f} over {len(rows)} points ({rho_min:.2f} on the minimum, "
                     f"{rho_med:.2f} on the median); measured/estimated ratio median {statistics.median(ratios):.2f} "
                     f"(range {min(ratios):.2f}-{max(ratios):.2f})")
        if pick != pick_then:
            lines.append(f"  (when the sweep ran, --auto picked {pick_then}; the model as it is now picks "
                         f"{pick or 'a layout the sweep did not measure'})")
        else:
            lines.append(f"  (--auto picked {pick_then} before the sweep ran; the model as it is now picks the same)")
        for when, name in (("before the sweep", pick_then), ("now", pick)):
            chosen = next((r for r in rows if r[0] == name), None)
            if chosen is None or (when == "now" and name == pick_then):
                continue
            gap = chosen[1] / best[1] - 1
            verdict = "within" if gap <= 0.15 else "NOT within"
            lines.append(f"  --auto's pick {when}, {name}: {chosen[1]:.2f} s measured, the best measured is {best[0]} "
                         f"at {best[1]:.2f} s: {gap:+.0%}, {verdict} 15%")
    if phases and rows:
        lines.append(f"  per phase, {q} measured / estimated seconds:")
        lines.append(f"  {'point':<31}" + "".join(f"{k:>18}" for k in PHASES))
        for name, _, e, _, reps in rows:
            cells = []
            for k, model_phases in PHASES.items():
                got = low_quantile([x for r in reps for x in r["phases"][k]])
                cells.append(f"{got:.3f}/{sum(e['phases'][p] for p in model_phases):.3f}")
            lines.append(f"  {name:<31}" + "".join(f"{c:>18}" for c in cells))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,small")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--report", default="", help="print the table of a finished run folder, running nothing")
    ap.add_argument("--phases", action="store_true", help="also the measured and estimated time of each phase")
    ap.add_argument("--steps", type=int, default=0, help="trainer.max_steps of every run (default: the model's)")
    ap.add_argument("--only", default="", help="comma-separated point names to run (a cut grid; the --auto pick "
                    "is always added)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    if args.steps:
        for model in models:
            MODELS[model]["overrides"] = [o for o in MODELS[model]["overrides"] if not o.startswith(
                "trainer.max_steps=")] + [f"trainer.max_steps={args.steps}"]
    if args.report:
        out = Path(args.report)
    else:
        out = Path(args.out or tempfile.mkdtemp(prefix="calib-")).resolve()
        out.mkdir(parents=True, exist_ok=True)
        for model in models:
            points = grid(model)
            if args.only:
                keep = set(args.only.split(","))
                points = [(n, v) for n, v in points if n in keep]
            pick = auto_pick(model)
            name = next((n for n, v in points if _same(v, pick, model)), None)
            if name is None:
                name = "auto-pick"
                points.append((name, pick))
            (out / model).mkdir(parents=True, exist_ok=True)
            (out / model / "auto.json").write_text(json.dumps({"name": name, "values": pick}))
            t0 = time.time()
            run_model(model, out, args.repeats, points)
            print(f"[{model}] {time.time() - t0:.0f} s", flush=True)
    print(f"cost model calibration, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, results in {out}")
    for model in models:
        print("\n".join(report(model, out, args.phases)))


if __name__ == "__main__":
    main()
