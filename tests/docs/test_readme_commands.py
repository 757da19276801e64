"""Every command the README shows runs here, as far as a CPU machine allows, and the mistake it shows prints what it
shows. An ``rlhf-run`` of a GPU recipe runs as ``rlhf-plan`` with the same overrides (which composes, validates and
plans exactly as rlhf-run does before anything starts; a sweep's jobs one by one); ``--rehearse`` is the Ray tier's
(tests/launch/test_rehearsal.py); the import commands convert scripts of the kind they name (from the importers'
tests); ``rlhf-run --resume`` and ``rlhf-serve-rm`` run for real on tiny runs made first."""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling, wait_until
from run_helpers import TINY_RUN

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT / "tests" / "importers"))
from openrlhf_commands import FLAT  # noqa: E402
from verl_commands import DATA_FILES, SAMPLE  # noqa: E402

README = (ROOT / "README.md").read_text()


def _headline() -> list[list[str]]:
    block = README.split("## Headline commands", 1)[1].split("A mistake is reported", 1)[0]
    lines = [ln.split("  #", 1)[0].strip() for ln in block.splitlines() if ln.startswith("    rlhf-")]
    return [shlex.split(ln) for ln in lines]


def _sh(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=cwd, timeout=ceiling(timeout)
    )


def _sweep_jobs(args: list[str]) -> list[list[str]]:
    """The jobs of ``-m a=x,y b=1,2``: every combination, as Hydra's basic sweeper makes them."""
    fixed = [a for a in args if "," not in a]
    swept = [[f"{a.split('=', 1)[0]}={v}" for v in a.split("=", 1)[1].split(",")] for a in args if "," in a]
    return [[*fixed, *combo] for combo in itertools.product(*swept)]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    # OpenRLHF's documented PPO command with the prompt dataset its example script names
    script = (
        FLAT["ppo"].rstrip() + " \\\n  --prompt_data OpenRLHF/prompt-collection-v0.1 --input_key context_messages\n"
    )
    (tmp_path / "train_ppo_llama_ray.sh").write_text(script)
    (tmp_path / "run_qwen2-7b_math.sh").write_text(SAMPLE["grpo_math"][0])
    (tmp_path / "grpo.yaml").write_text(  # a TRL GRPO config as TRL's docs write one
        "model_name_or_path: Qwen/Qwen2.5-0.5B-Instruct\ndataset_name: trl-lib/DeepMath-103K\n"
        "reward_funcs: [accuracy_reward]\n"
    )
    (tmp_path / "data").mkdir()
    for name in DATA_FILES:
        (tmp_path / "data" / name).write_text("")  # the import's --check validates that the files exist
    return tmp_path


def test_the_readme_shows_the_commands_this_test_runs():
    verbs = {(c[0], c[1] if len(c) > 1 else "") for c in _headline()}
    assert ("rlhf-run", "--resume") in verbs and ("rlhf-serve-rm", "--model") in verbs
    assert len(_headline()) >= 10


def _in_process(verb: str, args: list[str], capsys) -> str:
    """``verb args`` through its entry point in this process (what the console script calls): its output; the
    assertion names the command when it exits non-zero."""
    from rlhf.cli.plan import main as plan_main
    from rlhf.cli.recipes import main as recipes_main

    main = {"rlhf-plan": plan_main, "rlhf-recipes": recipes_main}[verb]
    code = 0
    try:
        main(args)
    except SystemExit as e:
        code = e.code or 0
    out = capsys.readouterr()
    assert code == 0, f"{verb} {' '.join(args)}:\n{out.out[-1500:]}{out.err[-1500:]}"
    return out.out


def test_every_headline_command_runs_as_far_as_this_machine_allows(folder, monkeypatch, capsys):
    monkeypatch.chdir(folder)
    ran = []
    for argv in _headline():
        verb, args = argv[0], argv[1:]
        if verb == "rlhf-run" and args[:1] == ["--resume"] or verb == "rlhf-serve-rm":
            continue  # the next test: they need a run made first
        if verb == "rlhf-run":
            jobs = _sweep_jobs(args[1:]) if args[:1] == ["-m"] else [args]
            for job in jobs:
                assert "verdict: fits" in _in_process("rlhf-plan", job, capsys)
        elif "-o" in args or "--check" in args:
            # a written recipe is composed by its file, which registers its name in this process's ConfigStore:
            # in a process of its own, so no later test in this worker meets that name
            r = _sh([verb, *args], folder)
            assert r.returncode == 0, f"{' '.join(argv)}:\n{r.stdout[-1500:]}{r.stderr[-1500:]}"
        else:
            _in_process(verb, [a for a in args if a != "--rehearse"], capsys)  # the rehearsal: the Ray tier's
        ran.append(" ".join(argv))
    assert (folder / "mine.yaml").is_file() and (folder / "ppo.yaml").is_file()  # what the -o flags asked for
    assert len(ran) >= 10


def test_resume_and_the_reward_server_run_on_tiny_runs_made_first(folder):
    made = _sh(["rlhf-run", *TINY_RUN, "trainer.max_steps=1", "logging.mlflow=false"], folder)
    assert made.returncode == 0, made.stderr[-3000:]
    resumed = _sh(["rlhf-run", "--resume"], folder)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "finished all its 1 steps" in resumed.stderr and "nothing to resume" in resumed.stderr

    rm = _sh(["rlhf-run", "+recipe=rm_tiny_cpu", "trainer.max_steps=1", "hydra.run.dir=runs/rm"], folder)
    assert rm.returncode == 0, rm.stderr[-3000:]
    (serve,) = [argv for argv in _headline() if argv[0] == "rlhf-serve-rm"]
    log = folder / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(BIN / serve[0]), *serve[1:]], cwd=folder, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(
            lambda: re.search(r"http://127\.0\.0\.1:\d+/get_reward", log.read_text()),
            "the reward server's address",
            120,
            alive=lambda: proc.poll() is None,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=ceiling(60))


def test_the_mistake_the_readme_shows_is_what_rlhf_run_prints(tmp_path):
    block = README.split("A mistake is reported", 1)[1].split("\n\n", 2)[1]
    lines = [ln[4:] for ln in block.splitlines()]
    command, shown = lines[0].removeprefix("$ "), lines[1:]
    r = _sh(shlex.split(command), tmp_path, timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]
    printed = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert printed[-len(shown) :] == shown
