"""Console output: a tqdm bar over optimizer steps with the key metrics, and the end-of-run summary."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """``update(metrics)`` once per step; shows the metrics named in ``keys`` (those present)."""

    def __init__(self, total: int, initial: int, desc: str, keys: tuple[str, ...], enabled: bool = True) -> None:
        from tqdm import tqdm

        self.keys = keys
        self.bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            disable=not enabled,
            dynamic_ncols=True,
            file=sys.stderr,
            leave=True,
        )

    def update(self, metrics: dict[str, Any], n: int = 1) -> None:
        shown = {k.split("/")[-1]: f"{metrics[k]:.4g}" for k in self.keys if k in metrics}
        self.bar.set_postfix(shown, refresh=False)
        self.bar.update(n)

    def write(self, line: str) -> None:
        self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()


def summary_lines(result: dict[str, Any]) -> list[str]:
    """The few lines printed when a job ends: where the model is, where each tracker keeps the run, the final
    metrics."""
    lines = [f"done: {result.get('family', '')} {result.get('steps', 0)} steps in {result.get('seconds', 0):.0f} s"]
    if result.get("model_dir"):
        lines.append(f"  model:      {result['model_dir']}")
    if result.get("checkpoint"):
        lines.append(f"  checkpoint: {result['checkpoint']}")
    for name, where in (result.get("trackers") or {}).items():
        if where:
            lines.append(f"  {name + ':':<11} {where}")
    final = result.get("final_metrics") or {}
    if final:
        lines.append("  final:      " + ", ".join(f"{k}={v:.4g}" for k, v in sorted(final.items())))
    return lines
