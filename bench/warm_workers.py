"""Does a Ray cluster's preloaded idle worker serve an rlhf-like actor? Times one actor at a time whose ``__init__``
imports torch and transformers, from ``.remote()`` to its first answer, with and without a per-actor ``runtime_env``
(rlhf's training actors carry their rank's variables there), on a private cluster started with or without Ray's
``preload_python_modules``.

    .venv/bin/python bench/warm_workers.py preload    # idle workers import torch and transformers before use
    .venv/bin/python bench/warm_workers.py none       # Ray's default

Figures and what they mean for start-up: bench/README.md, "Start-up".
"""

from __future__ import annotations

import os
import sys
import time


def main(mode: str) -> None:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only (machine.md)
    import ray

    system = {"preload_python_modules": ["torch", "transformers"]} if mode == "preload" else {}
    ray.init(num_cpus=2, include_dashboard=False, _system_config=system)
    time.sleep(20)  # Ray prestarts its idle workers after the driver connects

    @ray.remote(num_cpus=0.5)
    class Imports:
        def __init__(self) -> None:
            t = time.time()
            import torch  # noqa: F401
            import transformers  # noqa: F401

            self.import_s = time.time() - t

        def ready(self) -> float:
            return self.import_s

    for kind in ("plain", "env_vars", "plain"):
        opts = {} if kind == "plain" else {"runtime_env": {"env_vars": {"RANK": "0"}}}
        t = time.time()
        import_s = ray.get(Imports.options(**opts).remote().ready.remote())
        print(f"{mode:8s} {kind:9s} to ready {time.time() - t:5.2f} s, import in the actor {import_s:5.2f} s")
    ray.shutdown()


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("preload", "none"):
        sys.exit("usage: bench/warm_workers.py preload|none")
    main(sys.argv[1])
