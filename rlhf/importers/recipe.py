"""From mapped values to a recipe, for every importer: the closest options of conf/ (algorithm, model, placement,
rollout, hardware, trainer), only the values that differ from them, and the YAML text.

Choices: the algorithm preset with the same advantage estimator (or preference loss) and the fewest differing
values; the model option whose path is the command's, else one of the same family and size, else the nearest
size (said in the notes, since the plan's memory figures then are that option's); the placement preset whose
device groups are OpenRLHF's; the hardware option with the GPU type asked for and the command's device count.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlhf.importers.common import ImportProblem
from rlhf.importers.conf_options import options
from rlhf.importers.placeholders import UNKNOWN, Placeholder, describe
from rlhf.spec import schema
from rlhf.spec.paths import conf_dir
from rlhf.spec.required import escaped

# Tie-break between equally close algorithm presets: the plainer one first.
_ALGORITHM_ORDER = ("ppo", "grpo", "reinforce_pp", "reinforce_pp_baseline", "rloo", "dr_grpo", "gspo", "dapo")
_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)b(?![a-z])")


class Mapped(Protocol):
    """What an importer's mapping hands to :func:`build_recipe`."""

    values: dict[str, Any]  # our dotted key -> value
    # key -> (what was written, its unknown pieces[, why it cannot be carried over when no piece is unknown])
    unknown: dict[str, tuple]
    model_path: str
    groups: list[tuple[list[str], int]]  # device groups of the roles that run, with their device counts
    nodes: int
    devices_per_node: int


@dataclass
class Recipe:
    choices: dict[str, str]  # group -> option, in GROUPS order
    values: dict[str, Any]  # what the recipe writes: key -> value
    equal: dict[str, Any]  # mapped values the options already have (not written)
    notes: list[str] = field(default_factory=list)
    spec: Any = None  # the ExperimentSpec the recipe composes to (placeholders: with their stand-ins)
    placeholders: dict[str, Placeholder] = field(default_factory=dict)  # keys the script did not say


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _select(section: dict[str, Any], dotted: str) -> Any:
    node: Any = section
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _differences(values: dict[str, Any], group: str, section: dict[str, Any]) -> int:
    prefix = group + "."
    return sum(not _same(v, _select(section, k[len(prefix) :])) for k, v in values.items() if k.startswith(prefix))


# -- the choices -------------------------------------------------------------------------------------------------


def choose_algorithm(values: dict[str, Any], family: str) -> str:
    """The preset of ``family`` (rl, sft, rm, dpo) with the same estimator or loss and the fewest other changes."""
    opts = options("algorithm")
    if family == "rl":
        est = values["algorithm.advantage.estimator"]
        rl = [n for n, o in opts.items() if o["family"] == "rl"]
        # An estimator no preset has is a mistake validation names; any RL preset carries it there.
        pool = [n for n in rl if opts[n]["advantage"]["estimator"] == est] or rl
    elif family == "dpo":
        loss = values.get("algorithm.preference.loss", "dpo")
        dpo = [n for n, o in opts.items() if o["family"] == "dpo"]
        pool = [n for n in dpo if opts[n]["preference"]["loss"] == loss] or dpo
    else:
        pool = [family]
    order = {n: i for i, n in enumerate(_ALGORITHM_ORDER)}
    return min(pool, key=lambda n: (_differences(values, "algorithm", opts[n]), order.get(n, 99), n))


def model_family_size(name: str) -> tuple[str | None, float | None]:
    """('llama3', 8.0) from 'OpenRLHF/Llama-3-8b-sft-mixture'; None where the name does not say."""
    base = name.lower().rstrip("/").split("/")[-1]
    family = None
    if re.search(r"llama-?3", base):
        family = "llama3"
    elif re.search(r"qwen-?2\.5|qwen2_5", base):
        family = "qwen2_5"
    elif re.search(r"qwen-?3", base):
        family = "qwen3"
    elif "qwen" in base:
        family = "qwen2_5"
    sizes = _SIZE.findall(base)
    return family, (float(sizes[-1]) if sizes else None)


def _params(m: dict[str, Any]) -> float:
    h, layers, inter, vocab_size = m["hidden_size"], m["num_layers"], m["intermediate_size"], m["vocab_size"]
    kv = m["num_kv_heads"] * m["head_dim"]
    per_layer = h * (m["num_heads"] * m["head_dim"]) * 2 + h * kv * 2 + 3 * h * inter
    return layers * per_layer + vocab_size * h * (1 if m["tie_word_embeddings"] else 2)


def _local_config(path: str) -> dict[str, Any] | None:
    cfg = Path(path).expanduser() / "config.json"
    if not cfg.is_file():
        return None
    try:
        c = json.loads(cfg.read_text())
    except (OSError, ValueError):
        return None
    heads = c.get("num_attention_heads", 1)
    dims = {
        "hidden_size": c.get("hidden_size"),
        "num_layers": c.get("num_hidden_layers"),
        "num_heads": heads,
        "num_kv_heads": c.get("num_key_value_heads", heads),
        "head_dim": c.get("head_dim") or (c.get("hidden_size", 0) // max(heads, 1)),
        "intermediate_size": c.get("intermediate_size"),
        "vocab_size": c.get("vocab_size"),
        "max_position_embeddings": c.get("max_position_embeddings"),
        "tie_word_embeddings": c.get("tie_word_embeddings", False),
    }
    if any(v is None for v in dims.values()):
        return None
    arch = c.get("model_type", "llama")
    dims["architecture"] = arch if arch in ("llama", "qwen2", "qwen3") else "llama"
    return dims


def choose_model(path: str) -> tuple[str, dict[str, Any], str]:
    """(option, values to write, note) for the policy model ``path``."""
    opts = {n: o for n, o in options("model").items() if not o["make_local"]}
    for n, o in opts.items():
        if o["path"] == path:
            return n, {}, ""
    local = _local_config(path) if path else None
    family, size = model_family_size(path)
    by_size = {n: model_family_size(o["path"]) for n, o in opts.items()}
    same = [n for n, fs in by_size.items() if family and fs == (family, size)]
    if same:
        choice = same[0]
        note = f"model: {path} with the dimensions of option {choice} (same family and size)"
    else:
        pool = [n for n, fs in by_size.items() if fs[0] == family] or list(opts)
        target = size * 1e9 if size else (_params(local) if local else _params(opts["llama3_8b"]))
        choice = min(pool, key=lambda n: abs(math.log(_params(opts[n]) / target)))
        named = f"{size:g}B" if size else "unknown size"
        note = (
            f"model: no conf/model option for {path} ({named}); option {choice} chosen for its dimensions "
            f"(nearest size, {_params(opts[choice]) / 1e9:.1f}B), so the plan's memory figures are {choice}'s; "
            "add a conf/model option with the real dimensions for an exact plan"
        )
    values: dict[str, Any] = {"model.path": path} if path and path != opts[choice]["path"] else {}
    if local:
        values.update({f"model.{k}": v for k, v in local.items() if not _same(v, opts[choice].get(k))})
        note = f"model: {path}, dimensions read from its config.json (option {choice} otherwise)"
    return choice, values, note


def _partition(groups: list[list[str]], present: set[str]) -> set[frozenset[str]]:
    out, seen = set(), set()
    for g in groups:
        members = frozenset(r for r in g if r in present and r not in seen)
        if members:
            out.add(members)
            seen |= members
    return out | {frozenset([r]) for r in present - seen}


def choose_placement(m: Mapped) -> tuple[str, dict[str, Any]]:
    present = {r for g, _ in m.groups for r in g}
    wanted = {frozenset(g) for g, _ in m.groups}
    opts = options("placement")
    for name in ("split", "colocate_actor_ref", "colocate_critic_reward", "colocate_all"):  # plainest first
        if _partition(opts[name]["colocate"], present) == wanted:
            return name, {}
    colocate = [sorted(g, key=schema.ROLES.index) for g, _ in m.groups if len(g) > 1]
    return "split", {"placement.colocate": colocate}


def choose_hardware(requested: str | None, nodes: int, per_node: int) -> tuple[str, dict[str, Any], str]:
    opts = options("hardware")
    types = sorted({o["device_type"] for o in opts.values()})
    if requested in opts:
        o = opts[requested]
        note = ""
        if o["nodes"] * o["devices_per_node"] < nodes * per_node:
            note = (
                f"hardware={requested} has {o['nodes'] * o['devices_per_node']} devices; the command uses "
                f"{nodes * per_node} ({nodes} node(s) x {per_node}); validation reports it"
            )
        return requested, {}, note
    if requested is not None and requested not in types:
        raise ImportProblem(
            f"--hardware {requested}: neither a hardware option ({', '.join(opts)}) nor a device type "
            f"({', '.join(types)})"
        )
    dtype = requested or "h100"
    note = "" if requested else "hardware: the command does not say the GPU type; h100 assumed (pass --hardware)"
    same_type = {n: o for n, o in opts.items() if o["device_type"] == dtype}
    for n, o in same_type.items():
        if (o["nodes"], o["devices_per_node"]) == (nodes, per_node):
            return n, {}, note
    base = min(same_type, key=lambda n: (same_type[n]["devices_per_node"] != per_node, same_type[n]["nodes"]))
    name = f"{nodes}x{per_node}x{dtype}" if nodes > 1 else f"{per_node}x{dtype}"
    extra = f"option {base} with {nodes} node(s) x {per_node} devices"
    note = f"{note}; {extra}" if note else f"hardware: {extra}"
    return base, {"hardware.name": name, "hardware.nodes": nodes, "hardware.devices_per_node": per_node}, note


# -- the recipe --------------------------------------------------------------------------------------------------


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


def _plain(v: Any) -> Any:
    return OmegaConf.to_container(v) if isinstance(v, (DictConfig, ListConfig)) else v


def build_recipe(m: Mapped, hardware: str | None, family: str, rollout: str = "vllm") -> Recipe:
    """Choose the options, drop what they already have, and check the devices the plan derives."""
    from rlhf.spec.build import build
    from rlhf.spec.derive import derive

    values = dict(m.values)
    notes: list[str] = []
    model, model_values, note = choose_model(m.model_path)
    values.update(model_values)
    if "model.path" in m.unknown:
        values.setdefault("model.path", m.model_path)
        note = (
            f"model: the path is {describe(m.unknown['model.path'][1])}; option {model}'s dimensions "
            "are assumed for the plan (choose another model option, or add one, for an exact plan)"
        )
    notes += [note] if note else []
    placement, placement_values = choose_placement(m)
    values.update(placement_values)
    hw, hw_values, note = choose_hardware(hardware, m.nodes, m.devices_per_node)
    values.update(hw_values)
    notes += [note] if note else []
    cpu = options("hardware")[hw]["accelerator"] == "cpu"
    choices = {
        "algorithm": choose_algorithm(values, family),
        "model": model,
        "placement": placement,
        "rollout": rollout,
        "hardware": hw,
        "trainer": "cpu" if cpu else "default",
    }
    if family != "rl":
        choices.pop("rollout")
    base = composed(tuple(f"{g}={o}" for g, o in choices.items()))
    here = {k: _plain(OmegaConf.select(base, k)) for k in values}
    written = {k: v for k, v in values.items() if k in m.unknown or not _same(v, here[k])}
    placeholders = {
        k: Placeholder(k, entry[0], entry[1], values[k], here[k], entry[2] if len(entry) > 2 else "")
        for k, entry in m.unknown.items()
        if k in values
    }
    # Devices per role as OpenRLHF places them: explicit where the plan would derive other counts.
    for _ in range(3):
        spec = build(OmegaConf.merge(base, _nest(escaped(written))))
        derived = derive(spec)
        missing = [(g, n) for g, n in m.groups if any(derived.devices.get(r) != n for r in g)]
        if not missing:
            break
        for g, n in missing:
            written[f"placement.devices.{g[0]}"] = n
    equal = {k: v for k, v in values.items() if k not in written}
    return Recipe(choices, written, equal, notes, spec, placeholders)


def composed(overrides: tuple[str, ...]) -> DictConfig:
    """The shipped config with these group options (a copy: Hydra's composition is the slow part of an import)."""
    return _composed(overrides, str(conf_dir())).copy()


@functools.cache
def _composed(overrides: tuple[str, ...], folder: str) -> DictConfig:
    from rlhf.spec.build import compose

    return compose(list(overrides))


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        text = repr(v)
        if "e" in text and "." not in text.split("e")[0]:
            mantissa, exp = text.split("e")
            text = f"{mantissa}.0e{exp}"  # YAML 1.1 reads 5e-07 as a string
        return text
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    s = str(v)
    if re.fullmatch(r"[A-Za-z_][\w./-]*", s) and s.lower() not in ("true", "false", "null", "yes", "no", "on", "off"):
        return s
    return json.dumps(s.replace("${", "\\${"))  # a literal ${ is not an interpolation


def _comment(text: str) -> str:
    """``text`` safe after a ``#``: a script's words (a model path, a flag's value) may hold a line break, which
    would end the comment, or a control character, which YAML refuses anywhere in the file; each is written as its
    escape instead."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def render_yaml(recipe: Recipe, purpose: str, header: list[str], sources: dict[str, str]) -> str:
    """The recipe file: package header, purpose, defaults list, then the values section by section. A required
    placeholder is written as ``???`` where its value would be; an optional one is left out of the sections (the
    default here stands) and shown, commented, at the end."""
    holders = recipe.placeholders
    lines = ["# @package _global_", f"# {_comment(purpose)}", *[f"# {_comment(h)}" for h in header], "", "defaults:"]
    lines += [f"  - override /{g}: {o}" for g, o in recipe.choices.items()]
    order = [f.name for f in schema.ExperimentSpec.__dataclass_fields__.values()]

    def emit(node: dict[str, Any], indent: int, prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict):
                lines.append(f"{'  ' * indent}{key}:")
                emit(value, indent + 1, dotted + ".")
            elif dotted in holders:
                lines.append(f"{'  ' * indent}{key}: ???  # {_comment(holders[dotted].comment())}")
            else:
                comment = f"  # {_comment(sources[dotted])}" if dotted in sources else ""
                lines.append(f"{'  ' * indent}{key}: {_scalar(value)}{comment}")

    kept = {k: v for k, v in recipe.values.items() if not (k in holders and not holders[k].required)}
    nested = _nest(kept)
    for section in sorted(nested, key=lambda s: order.index(s) if s in order else len(order)):
        lines.append("")
        if isinstance(nested[section], dict):
            lines.append(f"{section}:")
            emit(nested[section], 1, section + ".")
        else:
            if section in holders:
                lines.append(f"{section}: ???  # {_comment(holders[section].comment())}")
            else:
                comment = f"  # {_comment(sources[section])}" if section in sources else ""
                lines.append(f"{section}: {_scalar(nested[section])}{comment}")
    optional = [h for h in holders.values() if not h.required]
    if optional:
        lines += [
            "",
            f"# {UNKNOWN} set outside the script, unknown here; the defaults here stand unless you give these:",
        ]
        lines += [f"#   {h.key}=...  # {_comment(h.comment())} (here: {_scalar(h.default_here)})" for h in optional]
    return "\n".join(lines) + "\n"


def schema_has(key: str) -> bool:
    """Whether this version's schema has ``key``: an importer writes a key only where it exists, and otherwise
    reports it as coming (another change may be adding it while this one lands)."""
    from rlhf.spec.keys import find_key

    return find_key(schema.ExperimentSpec, key) is not None


def schema_allows(key: str, value: Any) -> bool:
    """Whether ``key`` exists and its declared choices (if any) include ``value``."""
    from rlhf.spec.keys import find_key

    info = find_key(schema.ExperimentSpec, key)
    return info is not None and (info.domain.choices is None or value in info.domain.choices)
