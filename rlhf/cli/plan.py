"""rlhf-plan [--json] [--check] [-cd DIR] [-cn NAME] [+recipe=NAME] [key=value ...]: where every role runs and
whether it fits in memory. ``--auto [--top N] [-o FILE]``: the layouts that fit, ranked by estimated step time, the
best written as a recipe.

Pure and fast (no Ray, torch or DeepSpeed): composes, validates and plans, then prints a table. ``--check`` also
runs the preflight that ``rlhf-run`` runs before starting anything (reward and agent files parsed, reward URLs
probed, data files scanned, the reward model's head looked for) and exits 2 naming every problem.
"""

from __future__ import annotations

import argparse
import sys

from rlhf.cli.common import (
    add_source_arguments,
    compose_or_fail,
    fail,
    parse_with_overrides,
    source_of,
    spec_or_fail,
    with_default_recipe,
)
from rlhf.planning.memory import GB
from rlhf.planning.plan import Plan, plan
from rlhf.spec import SpecInvalid, build
from rlhf.spec.derive import OLD_LOGPROB_SOURCES


def _gb(x: float) -> str:
    return f"{x / GB:7.2f}"


def render(p: Plan) -> str:
    d = p.derived
    lines = [f"plan for {p.spec_name}: {p.params / 1e9:.3f}B parameters, {d.total_devices} device(s)"]
    lines.append(f"executor: {p.executor} ({p.executor_reason})")
    if p.training_engine:
        lines.append(f"training engine: {p.training_engine}")
    if p.rollout_engine:
        lines.append(f"rollout engine: {p.rollout_engine}")
    lines.append("")
    lines.append("roles")
    lines.append(f"  {'role':<10} {'group':>5} {'ranks':>5} {'share':>6}  {'mesh':<14} nodes of its bundles")
    for role, rp in p.roles.items():
        g = p.groups[rp.group]
        nodes = ",".join(str(n) for n in sorted(set(g.nodes)))
        extra = f"  {rp.ranks} engine(s) x TP {rp.bundles_per_rank}" if role == "rollout" else ""
        mesh = d.mesh[role].describe() if role in d.mesh else "-"
        lines.append(f"  {role:<10} {rp.group:>5} {rp.ranks:>5} {rp.fraction:>6.2f}  {mesh:<14} {nodes}{extra}")
    lines.append("")
    lines.append("derived")
    if d.samples_per_step:
        lines.append(f"  samples per step            {d.samples_per_step}")
        lines.append(f"  optimizer steps per rollout {d.optimizer_steps_per_rollout}")
        lines.append(f"  old log-probs               {OLD_LOGPROB_SOURCES[d.old_logprobs]}")
        lines.append(f"  effective gamma             {d.gamma}")
    for role, ga in d.grad_accum.items():
        lines.append(f"  gradient accumulation ({role}) {ga}")
    lines.append(f"  reward source               {d.reward_source}")
    lines.append(f"  max prompt tokens           {d.max_prompt_len}")
    lines.append("")
    lines.append("memory per device (GB)")
    head = (
        f"  {'group/role':<22}{'weights':>8}{'grads':>8}{'optim':>8}{'activ':>8}{'rollout':>8}{'device':>8}{'host':>8}"
    )
    lines.append(head)
    for m in p.memory:
        for role, s in m.per_role.items():
            lines.append(
                f"  {role:<22}{_gb(s.weights)} {_gb(s.grads)} {_gb(s.optimizer)} {_gb(s.activations)}"
                f" {_gb(s.rollout)} {_gb(s.device)} {_gb(s.host)}"
            )
        if p.sync is not None and any(r in p.sync.device for r in m.roles):
            extra = " ".join(f"{r} +{p.sync.device[r] / GB:.2f}" for r in m.roles if p.sync.device.get(r))
            lines.append(f"  {'weight sync':<22}{extra or 'nothing on these devices'}  (GB per device during a sync)")
        phases = f"train {m.train_phase_gb:.2f}"
        if m.rollout_phase_gb:
            phases += (
                f", rollout {m.rollout_phase_gb:.2f} (KV cache {m.kv_cache_gb:.2f} GB ~ {m.kv_cache_tokens} tokens)"
            )
        if m.sync_phase_gb:
            phases += f", sync {m.sync_phase_gb:.2f}"
        verdict = "fits" if m.fits else f"OVERFLOWS by {m.overflow_gb:.2f} GB"
        lines.append(f"  => {'+'.join(m.roles)}: peak {m.peak_gb:.2f} of {m.capacity_gb:.0f} GB ({phases}): {verdict}")
    lines.append("")
    if p.sync is not None:
        s = p.sync
        lines.append(
            f"weight sync: route {s.route}, buckets of {s.bucket / GB:.2f} GB (rollout.weight_sync_bucket_mb, at least "
            "the largest weight)"
        )
    if p.hosts:
        lines.append("host memory per node (GB)")
        for h in p.hosts:
            parts = ", ".join(f"{k} {v:.2f}" for k, v in h.parts_gb.items() if v) or "nothing"
            verdict = "fits" if h.fits else f"OVERFLOWS by {h.needed_gb - h.capacity_gb:.2f} GB"
            lines.append(f"  node {h.node}: {h.needed_gb:.2f} of {h.capacity_gb:.0f} GB ({parts}): {verdict}")
        lines.append("")
    for w in p.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"verdict: {p.verdict()}")
    return "\n".join(lines)


def _rehearse(spec, p: Plan, timeout_s: float) -> None:
    from rlhf.launch.rehearsal import RehearsalFailed, cluster_shape, rehearse, simulated_cluster

    nodes, gpus, cpus = cluster_shape(spec)
    print(f"starting a private Ray cluster on 127.0.0.1: {nodes} node(s) x {gpus} GPU(s) (declared)", file=sys.stderr)
    try:
        with simulated_cluster(nodes, gpus, cpus):
            report = rehearse(spec, p, timeout_s=timeout_s)
    except RehearsalFailed as e:
        fail(str(e), code=1)
    print(report.render())
    if not report.ok:
        sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="rlhf-plan", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print the plan as JSON")
    ap.add_argument("--check", action="store_true", help="also run the preflight (reward/agent files, URLs, data)")
    ap.add_argument(
        "--rehearse",
        action="store_true",
        help="start the run's processes on a private loopback Ray cluster declaring the recipe's GPUs, stopped "
        "before any device or weight is touched; print the device map and check it (exit 1 naming role, "
        "process and device on a violation)",
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="--rehearse: seconds any placement may take")
    ap.add_argument(
        "--auto",
        action="store_true",
        help="search the layouts the platform supports for this recipe on its hardware (placement, engines and TP, "
        "training engine, sequence parallelism, offload, micro-batches), keep those that fit, rank them by estimated "
        "step time and print the best with their memory and time per phase (rlhf/planning/auto.py, "
        "rlhf/planning/cost.py)",
    )
    ap.add_argument("--top", type=int, default=5, help="--auto: how many layouts to show")
    ap.add_argument("-o", "--output", help="--auto: write the best layout as a recipe to this file")
    add_source_arguments(ap)
    ap.add_argument(
        "overrides",
        nargs="*",
        help="Hydra overrides, e.g. +recipe=grpo_llama3_8b trainer.zero_stage=3 (hydra.searchpath=[file://DIR] too)",
    )
    args = parse_with_overrides(ap, sys.argv[1:] if argv is None else argv)
    source = source_of(args)
    overrides = with_default_recipe(args.overrides, source)
    if args.auto:
        from rlhf.cli import auto

        # not validated here: the search replaces the layout, so a recipe laid out for other hardware (more devices
        # than this one has, an engine wider than its nodes) is still a starting point; every candidate is
        # validated, and where none is found the recipe's own problems are reported (rlhf.cli.auto.run)
        try:
            spec = build(compose_or_fail(overrides, source))
        except SpecInvalid as e:  # a ??? left unfilled
            fail(str(e))
        auto.run(spec, overrides, top=args.top, out=args.output, config_dir=source.config_dir,
                 config_name=source.config_name)
        return
    spec = spec_or_fail(overrides, source)
    p = plan(spec)
    if args.rehearse:
        _rehearse(spec, p, args.timeout)
        return
    print(p.to_json() if args.json else render(p))
    if args.check:
        from rlhf.planning.preflight import PreflightFailed, require_preflight

        try:
            report = require_preflight(spec)
        except PreflightFailed as e:
            fail(str(e))
        print("\n".join([f"warning: {w}" for w in report.warnings] + [report.summary()]), file=sys.stderr)
    if not p.fits:  # a verdict a script can test: exit 1, as a failed rehearsal does
        cmd = " ".join(["rlhf-plan", "--auto", *args.overrides])
        fail(f"{p.verdict()}; `{cmd}` searches the layouts that fit this hardware", code=1)


if __name__ == "__main__":
    main()
