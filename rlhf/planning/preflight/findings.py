"""What the preflight reports: findings (errors and warnings) naming the config key, the value (file or URL), the
problem (with its line where there is one) and the fix; and the error that carries them all at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlhf.errors import UserError


@dataclass(frozen=True)
class Finding:
    key: str  # the config key, e.g. "reward.function" or "data.train_files[0]"
    value: Any  # what it is set to: a path or a URL
    problem: str
    fix: str = ""
    warning: bool = False  # True: reported, and the run starts anyway

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}: {self.problem}" + (f"; {self.fix}" if self.fix else "")


@dataclass
class PreflightReport:
    findings: list[Finding] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)  # what was looked at, e.g. "reward.urls[0] (0.01 s)"
    seconds: float = 0.0

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if not f.warning]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.warning]

    def summary(self) -> str:
        what = ", ".join(self.checked) if self.checked else "nothing to check"
        counts = f"{len(self.errors)} problem(s), {len(self.warnings)} warning(s)"
        return f"preflight: {counts} in {self.seconds:.2f} s ({what})"


class PreflightFailed(UserError):
    """Every problem the preflight found; raised before any process starts."""

    def __init__(self, report: PreflightReport) -> None:
        self.report = report
        errors = report.errors
        lines = [f"preflight found {len(errors)} problem(s); nothing was started:"]
        lines += [f"  - {e}" for e in errors]
        lines += [f"  (warning) {w}" for w in report.warnings]
        super().__init__("\n".join(lines))
