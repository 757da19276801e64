"""The planning package (plan, memory, cost model, --auto, preflight) is pure: importing all of it, in a fresh
interpreter, imports neither Ray nor torch (nor transformers, DeepSpeed or vLLM), and nothing of the launcher, the
pipelines, the workers or the CLI; the launcher talks to Ray, the planner never does."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

from ceilings import ceiling

import rlhf.planning

PACKAGE = Path(rlhf.planning.__file__).parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(PACKAGE)], "rlhf.planning."))
HEAVY = ("torch", "ray", "transformers", "deepspeed", "vllm")
ABOVE = ("rlhf.launch", "rlhf.pipelines", "rlhf.workers", "rlhf.cli", "rlhf.serve", "rlhf.api")


def test_the_planning_package_imports_without_ray_or_torch():
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}:\n"
        "    importlib.import_module(m)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))\n"
        f"print(sorted(m for m in sys.modules if m.startswith({ABOVE!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=ceiling(120))
    assert out.returncode == 0, out.stderr[-3000:]
    heavy, above = out.stdout.splitlines()
    assert (heavy, above) == ("[]", "[]")
    assert {"rlhf.planning.plan", "rlhf.planning.cost", "rlhf.planning.auto", "rlhf.planning.preflight"} <= set(MODULES)


def test_no_planning_module_names_the_launcher_or_a_layer_above_it():
    """Read statically, lazy imports inside functions included: the direction of imports (DESIGN.md) is
    cli -> launch -> planning, never back (the checkpoint.init_from check reads run folders through rlhf.run_files,
    below both)."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        bad = sorted(n for n in names if n.startswith(ABOVE) or n.split(".")[0] in ("ray",))
        if bad:
            offenders[str(path.relative_to(PACKAGE))] = bad
    assert offenders == {}
