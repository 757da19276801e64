"""The state one veRL command's mapping builds, and the few verbs every section's mapping speaks (``eff``: the value
veRL runs with; ``put``: our key from veRL's keys; ``need``, ``differ``, ``coming``; OutcomeBook's ``none`` and
``explain``). Each group of veRL settings maps in a module of its own, a function over this state
(rlhf.importers.verl.mapping runs them in order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlhf.importers.outcomes import Outcome, OutcomeBook
from rlhf.importers.verl import vocab
from rlhf.importers.verl.overrides import Command

UNSUPPORTED, GPU_ONLY, SUPERSEDED, NOT_NEEDED = vocab.UNSUPPORTED, vocab.GPU_ONLY, vocab.SUPERSEDED, vocab.NOT_NEEDED
COMING = "coming"

# veRL's sections, as its overrides spell them
ARA = "actor_rollout_ref"
ACTOR, ROLLOUT, REF, MODEL = f"{ARA}.actor", f"{ARA}.rollout", f"{ARA}.ref", f"{ARA}.model"

# Keys whose value is a path or a name: an unresolved one stands in as written (it still says what it is).
_TEXT_KEYS = {
    "data.train_files",
    "data.val_files",
    f"{MODEL}.path",
    "model.partial_pretrain",
    "model.path",
    "critic.model.path",
    "reward_model.model.path",
    "custom_reward_function.path",
    "trainer.default_local_dir",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.resume_from_path",
    f"{MODEL}.tokenizer_path",
    f"{MODEL}.custom_chat_template",
}


def _optional(key: str) -> bool:
    """Whether our ``key`` takes null (``int | None``): a null for any other would not compose."""
    from rlhf.spec.keys import find_key
    from rlhf.spec.schema import ExperimentSpec

    info = find_key(ExperimentSpec, key)
    return info is None or "None" in info.type


class VerlMapper(OutcomeBook):
    """One command's overrides (the last of each key wins), what they became so far and the verbs to say so.

    ``schema_has(key)`` / ``schema_allows(key, value)``: whether this version's schema has a key (or takes a value),
    for the settings written only once it does (rlhf.importers.recipe)."""

    def __init__(
        self,
        cmd: Command,
        hardware_type: str,
        schema_has: Callable[[str], bool],
        schema_allows: Callable[[str, Any], bool],
    ) -> None:
        self.cmd = cmd
        self.entry = cmd.entry
        self.rl = cmd.entry == "main_ppo"
        self.defaults = vocab.DEFAULTS[cmd.entry]
        self.cpu = hardware_type == "cpu"
        self.schema_has, self.schema_allows = schema_has, schema_allows
        self.outcomes = [Outcome() for _ in cmd.overrides]
        self.setting: dict[str, Any] = {}
        self.by: dict[str, int] = {}
        for i, o in enumerate(cmd.overrides):
            if not o.key or o.problem or o.prefix == "~":
                continue
            if o.key in self.by:
                self.outcomes[self.by[o.key]].overridden_by = o.text
            self.setting[o.key] = o.value
            self.by[o.key] = i
        self.unknown_k = {k: i for k, i in self.by.items() if cmd.overrides[i].unknown}
        self.values: dict[str, Any] = {}
        self.carried: dict[str, str] = {}
        self.notes: list[str] = []
        self.handled: set[str] = set()
        self.unknown: dict[str, tuple] = {}
        self.differs: dict[str, str] = {}
        self.backend = "vllm"  # our rollout backend (rlhf.importers.verl.rollout)
        self.reward_model = False  # a reward model role (rlhf.importers.verl.reward)

    def outcome(self, k: str) -> Outcome | None:
        """What became of the override that set ``k`` last (None when the command does not set it)."""
        return self._outcome(k)

    def given(self, k: str) -> bool:
        return k in self.setting

    def eff(self, k: str, kind: type | tuple[type, ...] | None = None) -> Any:
        """The value veRL runs with: the command's, else veRL's default; checked against ``kind``."""
        default = self.defaults.get(k)
        if k not in self.setting:
            return default
        if k in self.unknown_k:
            raw = self.setting[k]
            return raw if k in _TEXT_KEYS else default
        v = self.setting[k]
        kind = kind or (type(default) if default is not None else None)
        if kind is None or v is None:
            return v
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(v, bool) and bool not in kinds:
            ok = False
        else:
            ok = isinstance(v, kinds)
        if not ok:
            o = self._outcome(k)
            if o is not None and not o.problem:
                names_ = "/".join(t.__name__ for t in kinds)
                o.problem = f"takes {'an' if names_[0] in 'aeiou' else 'a'} {names_}, got {v!r}; veRL's default used"
            return default
        return v

    def put(self, key: str, value: Any, *ks: str, carry: bool = True) -> None:
        """Our ``key`` = ``value``, from veRL's keys ``ks`` (given, or when ``carry`` their defaults)."""
        self.handled.update(ks)
        given = [k for k in ks if self.given(k)]
        if not given and not carry:
            return
        if value is None and not _optional(key):  # a malformed value fell back to a null default: ours stands
            return
        self.values[key] = value
        unknown = [k for k in given if k in self.unknown_k]
        if unknown:
            o = self.cmd.overrides[self.unknown_k[unknown[0]]]
            self.unknown[key] = (" ".join(self.cmd.overrides[self.unknown_k[k]].text for k in unknown), o.unknown)
        for k in given:
            o = self._outcome(k)
            if key not in o.keys:
                o.keys.append(key)
        if not given and ks:
            self.carried[key] = ", ".join(ks)

    def need(self, key: str, stand_in: Any, written: str, why: str, by: str = "") -> None:
        """A value the recipe needs and no veRL key can give (it would mean something else here): ``???``; ``by``:
        the veRL key whose line in the report says so."""
        self.values[key] = stand_in
        self.unknown[key] = (written, (), why)
        o = self._outcome(by) if by else None
        if o is not None and key not in o.keys:
            o.keys.append(key)
        self.handled.add(by)

    def differ(self, k: str, how: str) -> None:
        """What ``k`` wrote computes something else than veRL does, in the way ``how`` says (the report's ``~>``)."""
        self.handled.add(k)
        self.differs[k] = f"{self.differs[k]}; {how}" if k in self.differs else how

    def coming(self, k: str, key: str, value: Any, meanwhile: str) -> None:
        """``key`` is not in this version's schema yet (another change adds it): say what it will be."""
        self.none(k, COMING, f"{key}={value} once that key exists here; meanwhile {meanwhile}")
