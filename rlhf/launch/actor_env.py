"""An actor's environment variables, set inside its process instead of through Ray's ``runtime_env``.

Ray hands an actor one of its idle, already started workers (on a private cluster: with torch, transformers and
the job's model code imported, rlhf.launch.worker_preload) only when the actor asks for no ``runtime_env`` of its
own; an actor that names even one variable there gets a fresh process that imports everything again (measured:
0.2-0.5 s against 2.5-3.3 s per actor on the 2-core machine, bench/README.md "Start-up"). The ranks' variables
(RANK, MASTER_ADDR, OMP_NUM_THREADS, ...) are read by our code and by torch.distributed when the process group is
made, long after the process started, so they are set in the process before the actor's ``__init__``. What is read
when the process starts stays in ``runtime_env`` (:func:`at_start`): PYTHONPATH (the actor's class is imported
before ``__init__``), OpenMP's wait policy (libgomp parses it when torch loads it), Ray's own switch for
CUDA_VISIBLE_DEVICES (applied before ``__init__`` runs); a variable the workers already started with needs neither.
"""

from __future__ import annotations

import functools
import os
from typing import Any

# Read when the worker process starts (the interpreter's and the loader's variables, OpenMP's runtime settings
# but its thread count, which torch.set_num_threads applies later) or by Ray before the actor's __init__ (which
# devices it sees): only runtime_env can set these.
AT_START = frozenset({"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"})
AT_START_PREFIXES = ("PYTHON", "LD_", "MALLOC_", "GOMP_", "KMP_", "OMP_")
IN_PROCESS = frozenset({"OMP_NUM_THREADS"})


def at_start(name: str) -> bool:
    """Whether variable ``name`` only takes effect when set before the worker process starts."""
    return name in AT_START or (name not in IN_PROCESS and name.startswith(AT_START_PREFIXES))


ENV_KWARG = "_rlhf_actor_env"


def split(
    runtime_env: dict[str, Any], worker_start_env: dict[str, str] | None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(what stays in ``runtime_env``, the variables to set in the process) for an actor of a cluster whose
    workers start with ``worker_start_env`` (None: not known, a cluster this process did not start; then
    everything stays in ``runtime_env``). A runtime_env with more than variables (another interpreter, py_modules)
    means a fresh process anyway: it is left whole."""
    env = dict(runtime_env.get("env_vars") or {})
    if worker_start_env is None or set(runtime_env) - {"env_vars"} or not env:
        return runtime_env, {}
    start = {k: v for k, v in env.items() if at_start(k) and worker_start_env.get(k) != v}
    in_process = {k: v for k, v in env.items() if k not in start}
    return ({"env_vars": start} if start else {}), in_process


def apply(env: dict[str, str] | None) -> None:
    """Set ``env`` in this process (an actor's, before its ``__init__``); OMP_NUM_THREADS also sizes torch's
    thread pool when torch is already imported (a preloaded worker's read the variable at its import)."""
    if not env:
        return
    os.environ.update(env)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import sys

        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(int(threads))


@functools.cache
def with_env(cls: type) -> type:
    """``cls`` taking one more keyword argument, ``_rlhf_actor_env``: variables set in the process before
    ``cls.__init__`` runs. Same name, so Ray's listings and errors name the role's class."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        apply(kwargs.pop(ENV_KWARG, None))
        cls.__init__(self, *args, **kwargs)

    return type(
        cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    )
