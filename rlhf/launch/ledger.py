"""Who holds what share of each bundle: every actor the launcher starts (and every tensor-parallel worker vLLM will
start for an engine) claims its Ray resources in its bundle here first, so a bundle asked for more than it has is
refused at once, naming the claimants, instead of leaving Ray to wait for ever for resources that never free up.

Pure bookkeeping (no Ray): the launch code claims, ``rlhf-plan --rehearse`` prints the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlhf.errors import UserError

_EPS = 1e-6  # shares are sums of fractions like 1/3


class OverBooked(UserError):
    """A bundle was asked for more of a resource than it holds."""


@dataclass(frozen=True)
class Claim:
    label: str  # e.g. "policy rank 3", "rollout engine 1 worker 0"
    group: int  # device group (placement group) index
    bundle: int  # bundle index within its placement group
    resources: dict[str, float]


@dataclass
class BundleLedger:
    """Capacity of every bundle, keyed by (group, bundle), and the claims on it."""

    capacity: dict[tuple[int, int], dict[str, float]]
    names: dict[int, str] = field(default_factory=dict)  # group index -> its roles, for messages
    claims: dict[str, Claim] = field(default_factory=dict)  # by label: claiming a label again replaces its claim

    def used(self, group: int, bundle: int, without: str | None = None) -> dict[str, float]:
        out: dict[str, float] = {}
        for c in self.claims.values():
            if (c.group, c.bundle) == (group, bundle) and c.label != without:
                for k, v in c.resources.items():
                    out[k] = out.get(k, 0.0) + v
        return out

    def free(self, group: int, bundle: int, without: str | None = None) -> dict[str, float]:
        cap = self.capacity[(group, bundle)]
        used = self.used(group, bundle, without)
        return {k: round(v - used.get(k, 0.0), 6) for k, v in cap.items()}

    def claim(self, label: str, group: int, bundle: int, resources: dict[str, float]) -> Claim:
        """Record ``label``'s share of a bundle, or raise :class:`OverBooked` naming who holds the bundle."""
        if (group, bundle) not in self.capacity:
            raise OverBooked(f"{label}: placement group {self.names.get(group, group)} has no bundle {bundle}")
        free = self.free(group, bundle, without=label)
        short = {k: v for k, v in resources.items() if v > free.get(k, 0.0) + _EPS}
        if short:
            holders = ", ".join(
                f"{c.label} ({_fmt(c.resources)})"
                for c in self.claims.values()
                if (c.group, c.bundle) == (group, bundle) and c.label != label
            )
            raise OverBooked(
                f"{label} needs {_fmt(resources)} in bundle {bundle} of placement group "
                f"{self.names.get(group, group)}, which has {_fmt(self.capacity[(group, bundle)])} and only "
                f"{_fmt(free)} free (held by {holders or 'nobody'}): Ray would wait for ever; the plan's shares "
                "of this bundle add up to more than one device"
            )
        c = Claim(label, group, bundle, {k: float(v) for k, v in resources.items() if v})
        self.claims[label] = c
        return c

    def release(self, label: str) -> None:
        self.claims.pop(label, None)


def _fmt(resources: dict[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(resources.items())) + "}"
