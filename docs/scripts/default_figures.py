"""The site's figures of the embedded default, drawn from a real run's metrics.jsonl (never typed by hand):

    rlhf-run hydra.run.dir=runs/quickstart          # the embedded default (about a minute and a half on 2 quiet cores)
    python docs/scripts/default_figures.py runs/quickstart

writes ``docs/figures/quickstart_eval.svg`` (eval pass@1 per task over the steps, with the SFT hand-over marked),
``docs/figures/quickstart.md`` (the start-up phases and the eval table, dated, with the run folder's name) and
``docs/figures/quickstart_run.json`` (the run's eval and start-up rows, its date, machine and commit: what the two are
drawn from, and what tests/docs/test_default_figures.py checks the README's and the laptop page's eval tables
against). ``--record docs/figures/quickstart_run.json`` draws them again from that record without a run.
Pure standard library: the SVG is drawn by hand.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "figures"
RECORD = "quickstart_run.json"
EVAL_PREFIX, EVAL_SUFFIX = "eval_", "_pass1"
COLOURS = ("#3f51b5", "#e91e63", "#009688", "#ff9800", "#795548")


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def eval_series(rows: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """Each task's eval pass@1 by step (``eval_<task>_pass1``, logged under ``eval/``)."""
    series: dict[str, list[tuple[int, float]]] = {}
    for row in rows:
        for logged, value in row.items():
            key = logged.removeprefix("eval/")
            if key.startswith(EVAL_PREFIX) and key.endswith(EVAL_SUFFIX) and isinstance(value, (int, float)):
                task = key[len(EVAL_PREFIX) : -len(EVAL_SUFFIX)]
                series.setdefault(task, []).append((int(row["step"]), float(value)))
    return {k: sorted(v) for k, v in sorted(series.items())}


def startup_phases(rows: list[dict]) -> list[tuple[str, float]]:
    """The start-up phases the run logged with its step-0 eval (``startup/<phase>_s``), in their order."""
    for row in rows:
        phases = [(k[len("startup/") : -2], float(v)) for k, v in row.items() if k.startswith("startup/")]
        if phases:
            return phases
    return []


def svg(series: dict[str, list[tuple[int, float]]], handover: int | None, width: int = 640, height: int = 300) -> str:
    """A line chart of ``series`` (pass@1 in [0, 1] against the step), one colour per task, a dashed line at
    ``handover``."""
    left, right, top, bottom = 48, 120, 16, 36
    steps = [s for points in series.values() for s, _ in points] or [0, 1]
    lo, hi = min(steps), max(max(steps), min(steps) + 1)

    def x(step: float) -> float:
        return left + (step - lo) / (hi - lo) * (width - left - right)

    def y(value: float) -> float:
        return top + (1 - value) * (height - top - bottom)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<line x1="{left}" y1="{y(0)}" x2="{width - right}" y2="{y(0)}" stroke="#999"/>',
        f'<line x1="{left}" y1="{y(0)}" x2="{left}" y2="{y(1)}" stroke="#999"/>',
    ]
    for v in (0.0, 0.5, 1.0):
        out.append(f'<text x="{left - 6}" y="{y(v) + 4}" text-anchor="end">{v:.1f}</text>')
    for s in (lo, hi):
        out.append(f'<text x="{x(s)}" y="{height - bottom + 16}" text-anchor="middle">{s}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" text-anchor="middle">step</text>')
    if handover is not None:
        out.append(
            f'<line x1="{x(handover)}" y1="{y(0)}" x2="{x(handover)}" y2="{y(1)}" stroke="#666" '
            'stroke-dasharray="4 3"/>'
        )
        out.append(f'<text x="{x(handover) + 4}" y="{y(0.05)}">SFT -&gt; GRPO</text>')
    for i, (task, points) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        path = " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in points)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        out.append(f'<text x="{width - right + 8}" y="{top + 16 * (i + 1)}" fill="{colour}">{task}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def page(run_dir: Path, rows: list[dict], handover: int | None, when: str, machine: str = "") -> str:
    series = eval_series(rows)
    steps = sorted({s for points in series.values() for s, _ in points})
    table = ["| step | " + " | ".join(series) + " |", "|---" * (len(series) + 1) + "|"]
    for step in steps:
        cells = [f"{dict(series[t]).get(step, float('nan')):.3f}" for t in series]
        table.append(f"| {step} | " + " | ".join(cells) + " |")
    phases = startup_phases(rows)
    startup = ", ".join(f"{name.replace('_', ' ')} {s:.1f} s" for name, s in phases) or "(not logged)"
    return (
        f"<!-- generated by docs/scripts/default_figures.py from {run_dir.name}/metrics.jsonl; do not edit -->\n\n"
        f"The embedded default (`rlhf-run`), run {when}{f' on {machine}' if machine else ''}: eval pass@1 per task"
        f"{f' (the SFT warm-up hands over at step {handover})' if handover is not None else ''}.\n\n"
        "![eval pass@1 over the steps](quickstart_eval.svg)\n\n" + "\n".join(table) + f"\n\nStart-up: {startup}.\n"
    )


def record(run_dir: Path, rows: list[dict], handover: int | None, when: str, machine: str, commit: str) -> dict:
    """What the figures are drawn from: the rows that hold an eval or a start-up phase, with their step."""
    kept = []
    for row in rows:
        picked = {
            k: v for k, v in row.items() if k.removeprefix("eval/").startswith(EVAL_PREFIX) or k.startswith("startup/")
        }
        if picked:
            kept.append({"step": row["step"], **picked})
    return {"run": run_dir.name, "when": when, "machine": machine, "commit": commit, "handover": handover, "rows": kept}


def write(out: Path, rec: dict) -> None:
    """The chart, the page and the record, into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "quickstart_eval.svg").write_text(svg(eval_series(rec["rows"]), rec["handover"]))
    (out / "quickstart.md").write_text(
        page(Path(rec["run"]), rec["rows"], rec["handover"], rec["when"], rec["machine"])
    )
    (out / RECORD).write_text(json.dumps(rec, indent=1) + "\n")


def _head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=OUT.parent)
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, nargs="?", help="the folder of a finished run of the embedded default")
    parser.add_argument("--record", type=Path, help=f"draw from a record this script wrote ({RECORD}) instead")
    parser.add_argument("--handover", type=int, default=100, help="the SFT warm-up's last step (sft_warmup.steps)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--machine", default="", help="where it ran, for the page (e.g. 'a 2-core CPU machine')")
    parser.add_argument("--commit", default=None, help="the commit the run ran (default: this checkout's HEAD)")
    args = parser.parse_args(argv)
    if args.record is not None:
        rec = json.loads(args.record.read_text())
    elif args.run_dir is not None:
        when = dt.datetime.fromtimestamp((args.run_dir / "metrics.jsonl").stat().st_mtime, dt.UTC).strftime(
            "%Y-%m-%d %H:%M UTC"
        )
        commit = _head() if args.commit is None else args.commit
        rec = record(args.run_dir, read_metrics(args.run_dir), args.handover, when, args.machine, commit)
    else:
        parser.error("give a run folder, or --record FILE")
    write(args.out, rec)
    print(f"wrote {args.out / 'quickstart_eval.svg'}, {args.out / 'quickstart.md'} and {args.out / RECORD}")


if __name__ == "__main__":
    main()
