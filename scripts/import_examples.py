"""Convert every script of a framework's examples/ folder with ``rlhf-recipes import-openrlhf|import-verl --check``
and say, per script, whether it converted (``--check`` passing, or naming only files or values this machine lacks),
why it is out of reach (a training method with no equivalent here, or not a training command), or what failed.

    python scripts/import_examples.py import-verl ~/verl/examples --out /tmp/verl_runs
    python scripts/import_examples.py import-openrlhf ~/OpenRLHF/examples/scripts

Not a test: it needs the other framework's examples (a checkout of github:volcengine/verl or OpenRLHF/OpenRLHF).
The README's counts (Coming from veRL) come from it.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import sys
import traceback
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

# A report line or note that puts a script out of reach: its method has no equivalent here.
OUT_OF_REACH = [
    (r"-- no equivalent \(unsupported: .*the closest estimator here", "advantage estimator with no equivalent"),
    (r"-- no equivalent \(unsupported: .*the recipe uses the PPO clip loss", "policy loss with no equivalent"),
    (r"-- no equivalent \(unsupported: vision-language models", "vision-language model"),
    (r"Qwen3-VL|Qwen2\.5-VL|-VL-", "vision-language model"),
    (r"multi-turn: veRL's tool-calling rollouts have no equivalent", "veRL multi-turn tool calling"),
    (r"-- no equivalent \(unsupported: veRL's \w+-level IS weights", "sequence-level rollout IS"),
    (r"-- no equivalent \(unsupported: veRL's rejection sampling and bypass", "rollout rejection sampling / bypass"),
    (r"-- no equivalent \(unsupported: MoE router replay", "MoE router replay"),
    (r"-- no equivalent \(unsupported: multi-token prediction", "multi-token prediction"),
    (r"-- no equivalent \(unsupported: PF-PPO", "PF-PPO reweighting"),
]
# What this machine lacks rather than what the recipe gets wrong: files, model folders, a tracker's package.
_MISSING = ("no such file", "no such model folder", "not a file here", "not a folder here", "tracker needs the")


def classify(text: str, wrote: bool, code: object) -> tuple[str, str]:
    """(converted | out | failed | crash, why) of one script's output."""
    if code not in (0, 2) or "Traceback" in text:
        return "crash", text.strip().splitlines()[-1] if text.strip() else str(code)
    if not wrote:
        return "out", text.strip().splitlines()[0].removeprefix("error: ")
    reasons = sorted({why for pattern, why in OUT_OF_REACH if re.search(pattern, text)})
    if reasons:
        return "out", ", ".join(reasons)
    problems = (
        re.findall(r"^  - (\S+?)=.*?: (.*)$", text.split("check: invalid config")[1], re.M)
        if ("check: invalid config" in text)
        else []
    )
    needs = "needs values" if "(required; " in text else ""
    bad = sorted({k.split("[")[0] for k, fix in problems if not any(m in fix for m in _MISSING)})
    if bad:
        return "failed", "invalid: " + ", ".join(bad)
    missing = "names only files (or packages) this machine lacks" if problems else "passes"
    return "converted", "; ".join(x for x in (missing, needs) if x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("verb", choices=("import-openrlhf", "import-verl"))
    ap.add_argument("examples", type=Path)
    ap.add_argument("--out", type=Path, default=Path("import_examples_out"), help="recipes and reports go here")
    args = ap.parse_args()
    from rlhf.cli.recipes import main as recipes_main

    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, tuple[str, str]] = {}
    for script in sorted(args.examples.rglob("*.sh")):
        name = str(script.relative_to(args.examples))
        stem = name.replace("/", "__")
        recipe = args.out / f"{stem}.yaml"
        recipe.unlink(missing_ok=True)
        out, err, code = io.StringIO(), io.StringIO(), None
        with redirect_stdout(out), redirect_stderr(err):
            try:
                recipes_main([args.verb, str(script), "-o", str(recipe), "--force", "--check"])
            except SystemExit as e:
                code = e.code
            except Exception:  # noqa: BLE001 - counted as a crash, with its traceback in the report file
                traceback.print_exc()
                code = "crash"
        text = out.getvalue() + err.getvalue()
        (args.out / f"{stem}.txt").write_text(text)
        results[name] = classify(text, recipe.exists(), code)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    counts = Counter(kind for kind, _ in results.values())
    in_reach = len(results) - counts["out"]
    print(
        f"{args.verb}: {counts['converted']} of {in_reach} in reach converted ({len(results)} scripts; "
        f"{counts['out']} out of reach, {counts['failed']} failed, {counts['crash']} crashed)"
    )
    for name, (kind, why) in sorted(results.items()):
        if kind != "converted":
            print(f"  [{kind}] {name}: {why}")
    sys.exit(1 if counts["crash"] else 0)


if __name__ == "__main__":
    main()
