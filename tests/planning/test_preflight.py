"""The preflight: every static mistake named (file, line, key, URL, fix) before anything starts, all at once.

Real files in tmp_path and real HTTP servers on 127.0.0.1; ``rlhf-run`` and ``rlhf-plan --check`` as subprocesses,
with Ray's temp folder pointed into tmp_path to show that no Ray process started.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from ceilings import ceiling

from rlhf.planning.preflight import PreflightFailed, preflight, require_preflight
from rlhf.planning.preflight.urls import probe_url
from rlhf.spec.build import load_spec

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GOOD_REWARD = "def reward_func(queries, prompts, labels, **kwargs):\n    return [0.0] * len(queries)\n"


@pytest.fixture(scope="module")
def base_spec():
    return load_spec(["+recipe=grpo_tiny_cpu", "reward.verifier="])


def with_(spec, **sections):
    """``spec`` with fields of its sections replaced, e.g. ``with_(spec, reward={"function": path})``."""
    return dataclasses.replace(
        spec, **{name: dataclasses.replace(getattr(spec, name), **fields) for name, fields in sections.items()}
    )


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def errors(report) -> list[str]:
    return [str(f) for f in report.errors]


# -- reward files ----------------------------------------------------------------------------------------------------


def test_reward_file_with_a_syntax_error_is_named_by_line_and_column(base_spec, tmp_path):
    path = write(tmp_path, "r.py", "import math\n\ndef reward_func(queries, prompts, labels):\n    return [1.0 for q\n")
    report = preflight(with_(base_spec, reward={"function": path}))
    (e,) = errors(report)
    assert e.startswith(f"reward.function={path!r}: line 4, column 12: SyntaxError:") and "py_compile" in e


def test_reward_file_is_parsed_not_run(base_spec, tmp_path):
    marker = tmp_path / "ran"
    path = write(tmp_path, "r.py", f"open({str(marker)!r}, 'w').write('x')\n\ndef reward_fn(q, p, l):\n    return q\n")
    (e,) = errors(preflight(with_(base_spec, reward={"function": path})))
    assert "defines no reward_func at module level (it defines: reward_fn)" in e
    assert "add def reward_func(queries, prompts, labels" in e
    assert not marker.exists()  # its module-level code did not run


@pytest.mark.parametrize(
    ("source", "needle"),
    [
        ("def reward_func(queries):\n    return queries\n", "reward_func takes 1 positional (queries)"),
        ("def reward_func(q, p, l, extra):\n    return q\n", "reward_func requires 4 positional"),
        ("def reward_func(q, p, l, *, scale):\n    return q\n", "requires keyword 'scale'"),
        ("import no_such_package_xyz\n" + GOOD_REWARD, "line 1: imports 'no_such_package_xyz'"),
    ],
)
def test_reward_func_that_cannot_be_called_as_the_loader_calls_it(base_spec, tmp_path, source, needle):
    path = write(tmp_path, "r.py", source)
    (e,) = errors(preflight(with_(base_spec, reward={"function": path})))
    assert needle in e


@pytest.mark.parametrize(
    "source",
    [
        GOOD_REWARD,
        "async def reward_func(queries, prompts, labels, responses):\n    return [0.0] * len(queries)\n",
        "def _f(*args, **kw):\n    return [0.0]\n\nreward_func = _f\n",
        "try:\n    import no_such_package_xyz\nexcept ImportError:\n    pass\n" + GOOD_REWARD,
    ],
)
def test_reward_files_the_loader_accepts_pass(base_spec, tmp_path, source):
    report = preflight(with_(base_spec, reward={"function": write(tmp_path, "r.py", source)}))
    assert report.findings == []


def test_reward_func_made_at_run_time_is_a_warning_not_an_error(base_spec, tmp_path):
    path = write(tmp_path, "r.py", "globals()['reward_func'] = lambda q, p, l: [0.0] * len(q)\n")
    report = require_preflight(with_(base_spec, reward={"function": path}))  # does not raise
    (w,) = report.warnings
    assert "can be seen without running it" in str(w) and "globals() (line 1)" in str(w)


# -- agent files -----------------------------------------------------------------------------------------------------

INSTANCE_WITHOUT_STEP = """
from rlhf.agents import AgentInstanceBase

class AgentInstance(AgentInstanceBase):
    async def reset(self, states, **kwargs):
        return states
"""


@pytest.mark.parametrize(
    ("executor", "source", "needle"),
    [
        ("multi_turn", "async def run_agent(prompt, label, session):\n    return {}\n", "defines none of what"),
        ("openai", INSTANCE_WITHOUT_STEP, "agent.executor=openai loads"),
        ("multi_turn", INSTANCE_WITHOUT_STEP, "line 4: class AgentInstance has no step() method"),
        ("openai", "def run_agent(prompt, label, session):\n    return {}\n", "run_agent is a plain 'def'"),
        (
            "auto",
            "class AgentInstance:\n    def __init__(self, env):\n        pass\n    step = None\n",
            "AgentInstance() is made with no arguments, but __init__ requires env",
        ),
        (
            "multi_turn",
            "from openrlhf.utils.agent import AgentInstanceBase\n" + INSTANCE_WITHOUT_STEP.split("\n", 2)[2],
            "class AgentInstance has no step() method",  # the OpenRLHF import resolves (rlhf.compat.openrlhf)
        ),
    ],
)
def test_agent_file_without_what_its_executor_loads(base_spec, tmp_path, executor, source, needle):
    path = write(tmp_path, "agent.py", source)
    spec = with_(base_spec, agent={"path": path, "executor": executor})
    with pytest.raises(PreflightFailed) as err:
        require_preflight(spec)
    assert f"agent.path={path!r}" in str(err.value) and needle in str(err.value)


@pytest.mark.parametrize(
    ("file", "executor"),
    [("arith_env.py", "multi_turn"), ("arith_env.py", "auto"), ("calculator_openai.py", "openai")],
)
def test_shipped_agent_examples_pass(base_spec, file, executor):
    spec = with_(base_spec, agent={"path": str(REPO / "examples/agents" / file), "executor": executor})
    assert preflight(spec).findings == []


# -- reward URLs -----------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def reward_server():
    """``reward_server(status, silent)``: a real HTTP server on 127.0.0.1 answering POSTs; a ``silent`` one answers
    only once the test is over (a server that never answers in time, whatever the machine's speed)."""
    servers = []
    over = threading.Event()

    def start(status: int = 200, silent: bool = False) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                self.rfile.read(int(self.headers["Content-Length"]))
                if silent:
                    over.wait(ceiling(300))
                body = json.dumps({"rewards": []}).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except BrokenPipeError:  # the probe stopped waiting (the silent-server case)
                    pass

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/get_reward"

    yield start
    over.set()
    for s in servers:
        s.shutdown()
        s.server_close()


def test_dead_reward_url_fails_at_once_naming_it(base_spec):
    # refused, not timed out: the connection's refusal is the answer (a timeout says "no connection ... within")
    url = f"http://127.0.0.1:{free_port()}/get_reward"
    with pytest.raises(PreflightFailed) as err:
        require_preflight(with_(base_spec, reward={"urls": [url]}))
    assert f"reward.urls[0]={url!r}: connection refused: nothing listens on 127.0.0.1:" in str(err.value)
    assert "start the server, or fix reward.urls" in str(err.value)


def test_live_url_passes_and_wrong_path_is_an_error(base_spec, reward_server):
    url = reward_server()
    assert preflight(with_(base_spec, reward={"urls": [url]})).findings == []
    wrong = reward_server(status=404)
    (e,) = errors(preflight(with_(base_spec, reward={"urls": [url, wrong]})))
    assert e.startswith(f"reward.urls[1]={wrong!r}: answered HTTP 404") and "/get_reward" in e


def test_slow_reward_url_warns_and_the_run_may_start(base_spec, reward_server, monkeypatch):
    from rlhf.planning.preflight import urls

    # "slow" is any answer here (its threshold injected as 0 s), rather than a server made to take long enough
    monkeypatch.setattr(urls, "SLOW_ANSWER_S", 0.0)
    url = reward_server()
    report = require_preflight(with_(base_spec, reward={"urls": [url]}))  # does not raise
    (w,) = report.warnings
    assert f"reward.urls[0]={url!r}: the first answer took " in str(w) and "s (slow server?)" in str(w)


def test_silent_reward_url_warns_after_the_answer_timeout(reward_server):
    url = reward_server(silent=True)
    probe = probe_url(url, answer_timeout_s=0.5)
    assert probe.ok and "no answer within 0.5 s" in probe.warning


# -- data files ------------------------------------------------------------------------------------------------------


def test_malformed_json_line_is_named_by_file_and_line(base_spec, tmp_path):
    good = json.dumps({"input": "1+1=", "label": "2"})
    path = write(tmp_path, "train.jsonl", f'{good}\n{{"input": "2+2=", "label": \n{good}\n[1, 2]\n')
    (e,) = errors(preflight(with_(base_spec, data={"train_files": [path]})))
    assert e.startswith(f"data.train_files[0]={path!r}: line 2: not valid JSON (Expecting value, column")
    assert "line 4: an array, not a JSON object" in e and "data.on_bad_row=skip" in e
    skipping = preflight(with_(base_spec, data={"train_files": [path], "on_bad_row": "skip"}))
    assert skipping.errors == [] and "2 malformed line(s) will be skipped" in str(skipping.warnings[0])


@pytest.mark.parametrize(("name", "text"), [("e.jsonl", ""), ("e.json", "[]"), ("e.csv", "input,label\n")])
def test_empty_data_file_is_reported_as_empty(base_spec, tmp_path, name, text):
    path = write(tmp_path, name, text)
    (e,) = errors(preflight(with_(base_spec, data={"eval_files": [path]})))
    assert e.startswith(f"data.eval_files[0]={path!r}: the file is empty (no rows)")


def test_missing_column_in_the_first_row_names_the_key_and_the_columns(base_spec, tmp_path):
    path = write(tmp_path, "t.csv", "question,label\n1+1=,2\n")
    (e,) = errors(preflight(with_(base_spec, data={"train_files": [path]})))
    assert "the header has no column 'input' (data.input_key); its columns: question, label" in e


def test_a_later_row_without_a_column_is_named_by_row_and_line_with_the_count(base_spec, tmp_path):
    good = json.dumps({"input": "1+1=", "label": "2"})
    rows = [good] * 3 + [json.dumps({"input": "2+2="}), good, json.dumps({"input": "3+3=", "label": None})]
    path = write(tmp_path, "train.jsonl", "\n".join(rows) + "\n")
    (e,) = errors(preflight(with_(base_spec, data={"train_files": [path]})))
    assert "row 3 (line 4) has no value for column 'label' (data.label_key), and 1 more row(s)" in e
    assert "data.on_bad_row=skip" in e
    skipping = preflight(with_(base_spec, data={"train_files": [path], "on_bad_row": "skip"}))
    assert skipping.errors == [] and "such rows will be skipped" in str(skipping.warnings[0])
    csv_path = write(tmp_path, "t.csv", "input,label\n1+1=,2\n2+2=,\n")
    (e,) = errors(preflight(with_(base_spec, data={"train_files": [csv_path]})))
    assert "row 1 (line 3) has no value for column 'label'" in e


# -- reward model ----------------------------------------------------------------------------------------------------


def fake_checkpoint(folder: Path, names: list[str], architecture: str) -> Path:
    """A folder with config.json and a safetensors file holding zero-sized tensors of these names."""
    folder.mkdir()
    header = json.dumps({n: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for n in names}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture], "model_type": "llama"}))
    return folder


def test_reward_model_without_a_value_head_is_refused_before_start(base_spec, tmp_path):
    body = ["model.embed_tokens.weight", "model.norm.weight"]
    policy = fake_checkpoint(tmp_path / "policy", [*body, "lm_head.weight"], "LlamaForCausalLM")
    (e,) = errors(preflight(with_(base_spec, reward={"model_path": str(policy)})))
    assert "no value head weights (score.weight)" in e and "LlamaForCausalLM" in e and "lm_head.weight" in e
    assert "train one with algorithm=rm" in e
    rm = fake_checkpoint(tmp_path / "rm", [*body, "score.weight"], "LlamaForSequenceClassification")
    assert preflight(with_(base_spec, reward={"model_path": str(rm)})).findings == []


# -- the entry points ------------------------------------------------------------------------------------------------


def run_cli(cmd: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, HYDRA_FULL_ERROR="0", RAY_TMPDIR=str(cwd / "ray-tmp"))
    return subprocess.run(
        [str(BIN / cmd), *args], capture_output=True, text=True, timeout=ceiling(120), cwd=cwd, env=env
    )


def test_rlhf_run_names_every_problem_and_starts_nothing(tmp_path):
    reward = write(tmp_path, "r.py", "def reward(queries, prompts, labels):\n    return queries\n")
    train = write(tmp_path, "t.jsonl", '{"input": "1+1=", "label": "2"}\n{"input": \n')
    empty = write(tmp_path, "e.jsonl", "")
    overrides = ["reward.verifier=", f"reward.function={reward}", f"data.train_files=[{train}]"]
    r = run_cli("rlhf-run", *overrides, f"data.eval_files=[{empty}]", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "preflight found 3 problem(s); nothing was started" in r.stderr
    assert f"reward.function='{reward}': defines no reward_func" in r.stderr
    assert f"data.train_files[0]='{train}': line 2: not valid JSON" in r.stderr
    assert f"data.eval_files[0]='{empty}': the file is empty" in r.stderr
    assert "Traceback" not in r.stderr + r.stdout and "rlhf-run:" not in r.stdout
    assert not (tmp_path / "ray-tmp").exists() and not (tmp_path / "mlflow.db").exists()  # no Ray, no MLflow


def test_rlhf_run_with_a_dead_reward_url_stops_before_starting_anything(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/get_reward"
    r = run_cli("rlhf-run", "reward.verifier=", f"reward.urls=[{url}]", cwd=tmp_path)
    assert r.returncode == 2 and f"reward.urls[0]='{url}': connection refused" in r.stderr, r.stderr
    assert not (tmp_path / "ray-tmp").exists() and "rlhf-run:" not in r.stdout  # refused before the run began


def test_plan_check_runs_the_preflight_and_plain_plan_does_not(tmp_path):
    reward = write(tmp_path, "r.py", "def reward_func(queries, prompts, labels)\n    return queries\n")
    args = ["reward.verifier=", f"reward.function={reward}"]
    plain = run_cli("rlhf-plan", *args, cwd=tmp_path)
    assert plain.returncode == 0 and "preflight" not in plain.stderr
    checked = run_cli("rlhf-plan", "--check", *args, cwd=tmp_path)
    assert checked.returncode == 2 and "verdict:" in checked.stdout
    assert f"reward.function='{reward}': line 1, column" in checked.stderr and "SyntaxError" in checked.stderr
    good = run_cli("rlhf-plan", "--check", cwd=tmp_path)
    assert good.returncode == 0 and "preflight: 0 problem(s), 0 warning(s)" in good.stderr


# Recipes that leave a model folder to the command line (Hydra's ???): given a real one, they pass like the rest.
COMMAND_LINE_MODEL = {"opd_tiny_cpu": "teacher.model_path"}


@pytest.fixture(scope="module")
def tiny_model_dir():
    from rlhf.models.tiny import make_tiny_model

    return make_tiny_model(load_spec(["+recipe=grpo_tiny_cpu"]).model)


@pytest.mark.parametrize("recipe", sorted(p.stem for p in (REPO / "recipes").glob("*.yaml")))
def test_every_shipped_recipe_passes_the_preflight(recipe, request):
    given = (
        [f"{COMMAND_LINE_MODEL[recipe]}={request.getfixturevalue('tiny_model_dir')}"]
        if recipe in COMMAND_LINE_MODEL
        else []
    )
    report = preflight(load_spec([f"+recipe={recipe}", *given]))
    assert report.findings == [], [str(f) for f in report.findings]
