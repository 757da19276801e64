"""``rlhf-plan --auto``'s output: the best layouts with their estimated time per phase and memory, the recipe as
given beside them, and the best written as a recipe (``-o FILE``)."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from rlhf.cli.common import fail
from rlhf.planning.auto import TIE_PER_CHANGE, Candidate, SearchResult, search
from rlhf.planning.cost import PHASES
from rlhf.planning.memory import sleeps
from rlhf.spec.registry import rollout_backend, train_backend
from rlhf.spec.schema import ExperimentSpec

_SHORT = {"policy": "pol", "reference": "ref", "teacher": "tea", "critic": "cri", "reward": "rm", "rollout": "gen"}


def _placement(c: Candidate) -> str:
    groups = " ".join(f"{'+'.join(_SHORT[r] for r in g.roles)}={g.size}" for g in c.plan.groups)
    return f"{c.spec.placement.name}: {groups}"


def _rollout(c: Candidate) -> str:
    if "rollout" not in c.plan.roles:
        return "-"
    ro = c.spec.rollout
    turns = any(sleeps(c.spec, g.roles) for g in c.plan.groups)
    util = rollout_backend(ro.backend).label(c.spec)
    return f"{ro.num_engines}xTP{ro.tensor_parallel_size}{util}{' turns' if turns else ''}"


def _engine(s: ExperimentSpec) -> str:
    sp = s.trainer.sequence_parallel_size
    return train_backend(s.trainer.backend).label(s) + (f" sp{sp}" if sp > 1 else "")


def _frozen(s: ExperimentSpec) -> str:
    return "host" if (s.reference.offload or s.reward.offload or s.teacher.offload) else "device"


def _peak(c: Candidate) -> str:
    worst = max(c.plan.memory, key=lambda m: m.peak_gb / m.capacity_gb)
    host = max(c.plan.hosts, key=lambda h: h.needed_gb, default=None)
    h = f" host {host.needed_gb:.0f}/{host.capacity_gb:.0f}" if host is not None and host.needed_gb >= 0.5 else ""
    return f"{worst.peak_gb:.1f}/{worst.capacity_gb:.0f}{h}"


def _row(label: str, c: Candidate) -> str:
    s = c.spec
    fwd = s.rollout.micro_batch_per_device if s.algorithm.family == "rl" else s.trainer.micro_batch_per_device
    recompute = "yes" if s.trainer.gradient_checkpointing else "no"
    return (
        f"  {label:>5} {c.seconds:>8.1f}  {_placement(c):<34} {_rollout(c):<17} {_engine(s):<22} {recompute:<5} "
        f"{_frozen(s):<6} {s.trainer.micro_batch_per_device:>3}/{fwd:<4} {_peak(c)}"
    )


def render(result: SearchResult, spec: ExperimentSpec) -> str:
    hw = spec.hardware
    r = result
    devices = hw.nodes * hw.devices_per_node
    lines = [
        f"rlhf-plan --auto: {spec.recipe or '(no recipe)'} on {hw.name} ({hw.nodes} x {hw.devices_per_node} "
        f"{hw.device_type}, {hw.device_memory_gb:.0f} GB each, {devices} device(s))",
        f"searched {r.placements} placement(s), {r.layouts} layout(s) under the promising ones, {r.planned} plan(s) "
        f"in {r.seconds:.1f} s; {r.fitting} fitting point(s) kept, {len(r.invalid)} refused by validation",
    ]
    if not r.ranked:
        return "\n".join(lines)
    lines += [
        "",
        f"  {'#':>5} {'s/step':>8}  {'placement (devices per group)':<34} {'rollout':<17} {'training engine':<22} "
        f"{'recomp':<5} {'frozen':<6} {'micro':<8} peak GB/device (host/node)",
    ]
    for i, c in enumerate(r.ranked, 1):
        lines.append(_row(str(i), c))
    if r.base is not None:
        lines.append(_row("given", r.base) + ("" if r.base.plan.fits else f"  ({r.base.plan.verdict()})"))
    lines.append(
        f"  (ranked by estimated time, each key changed from the recipe counting {TIE_PER_CHANGE:.1%} "
        "against a layout: near-ties keep the recipe's choices)"
    )
    lines += ["", "estimated seconds per phase"]
    lines.append("  " + f"{'#':>5} " + "".join(f"{p:>11}" for p in PHASES) + f"{'total':>9}")
    rows = [(str(i), c) for i, c in enumerate(r.ranked, 1)] + ([("given", r.base)] if r.base else [])
    for label, c in rows:
        lines.append(f"  {label:>5} " + "".join(f"{c.cost.phases[p]:>11.2f}" for p in PHASES) + f"{c.seconds:>9.1f}")
    if any(c.cost.overlapped for _, c in rows):
        lines.append("  (rollout.async_mode: generation and reward overlap experience and training)")
    lines += ["", "memory per device (GB): each device group's peak of its train / rollout / sync phases"]
    for label, c in rows:
        parts = []
        for m in c.plan.memory:
            phase = f"train {m.train_phase_gb:.1f}"
            if m.rollout_phase_gb:
                phase += f", rollout {m.rollout_phase_gb:.1f}"
            if m.sync_phase_gb:
                phase += f", sync {m.sync_phase_gb:.1f}"
            parts.append(f"{'+'.join(_SHORT[x] for x in m.roles)} {m.peak_gb:.1f} of {m.capacity_gb:.0f} ({phase})")
        lines.append(f"  {label:>5}  " + "; ".join(parts))
    lines += ["", "what the best changes from the recipe:"]
    best = r.ranked[0]
    for key in best.changed:
        lines.append(f"  {key}={_value(best.values[key])}")
    if not best.changed:
        lines.append("  nothing: the recipe's layout is the best the model finds")
    return "\n".join(lines)


def larger_hardware(spec: ExperimentSpec) -> list[tuple[str, float]]:
    """(name, total device memory in GB) of the shipped conf/hardware options with more device memory in all than
    the spec's hardware, smallest first."""
    from omegaconf import OmegaConf

    from rlhf.spec.paths import conf_dir

    hw = spec.hardware
    have = hw.nodes * hw.devices_per_node * hw.device_memory_gb
    out = []
    for path in sorted((conf_dir() / "hardware").glob("*.yaml")):
        node = OmegaConf.load(path)
        total = node.get("nodes", 1) * node.get("devices_per_node", 1) * node.get("device_memory_gb", 16.0)
        if total > have:
            out.append((path.stem, float(total)))
    return sorted(out, key=lambda x: x[1])


def nothing_fits(result: SearchResult, spec: ExperimentSpec) -> str:
    """The error when no layout fits: why the closest one does not, and what to change."""
    hw = spec.hardware
    lines = [
        f"no layout of {spec.recipe or 'this config'} fits hardware={hw.name} ({hw.nodes} x {hw.devices_per_node} "
        f"{hw.device_type}, {hw.device_memory_gb:.0f} GB each)"
    ]
    if result.invalid:
        values, errors = result.invalid[0]
        lines.append(f"  the layouts that fit memory are refused by validation, e.g.: {errors[0]}")
    else:
        lines.append(f"  the closest layout: {result.why_none}")
    if result.base_errors:
        lines.append("  the recipe as given: " + "; ".join(result.base_errors[:3]))
    bigger = ", ".join(f"hardware={n} ({gb:.0f} GB)" for n, gb in larger_hardware(spec)[:3])
    lines.append(
        "  change: hardware with more device memory"
        + (f" ({bigger})" if bigger else " (more nodes: hardware.nodes=N)")
        + ", a smaller model (model=...), LoRA (model.lora.rank=16), or a smaller batch or lengths "
        "(rollout.prompts_per_step, rollout.max_new_tokens, data.max_len)"
    )
    return "\n".join(lines)


def _value(v: object) -> str:
    return "null" if v is None else str(v).replace("'", "").replace(" ", "")


def run(
    spec: ExperimentSpec,
    overrides: Sequence[str],
    *,
    top: int,
    out: str | None,
    config_dir: str | None,
    config_name: str | None,
) -> None:
    """Search, print, and write the best as a recipe when ``out`` is given (exit 1 when nothing fits)."""
    from rlhf.planning.auto_recipe import header_lines, write_recipe

    result = search(spec, top)
    print(render(result, spec))
    if not result.ranked:
        fail(nothing_fits(result, spec))
    if out:
        command = "rlhf-plan --auto " + " ".join(shlex.quote(o) for o in overrides) + f" -o {shlex.quote(out)}"
        given = result.base.seconds if result.base is not None and result.base.plan.fits else None
        header = header_lines(spec.recipe or "(no recipe)", spec.hardware.name, result.ranked[0], given, command)
        write_recipe(
            Path(out), overrides, result.ranked[0], header=header, config_dir=config_dir, config_name=config_name
        )
        print(f"\nwrote the best layout to {out}: rlhf-run +recipe={out}  (rlhf-plan +recipe={out} shows its plan)")
