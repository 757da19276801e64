"""Run by test_rehearsal.py in a process of its own: one simulated cluster of one hardware shape, then
``rlhf-plan --rehearse``'s rehearsal of every config given (each a list of overrides) on it, one JSON line each."""

from __future__ import annotations

import json
import sys
import time


def main(shape: str, configs_json: str) -> None:
    from rlhf.launch.rehearsal import rehearse, simulated_cluster
    from rlhf.planning.plan import plan
    from rlhf.spec import check
    from rlhf.spec.build import load_spec

    nodes, gpus, cpus = (int(x) for x in shape.split("x"))
    t0 = time.monotonic()
    with simulated_cluster(nodes, gpus, cpus):
        print("CLUSTER " + json.dumps({"seconds": time.monotonic() - t0}), flush=True)
        for overrides in json.loads(configs_json):
            t = time.monotonic()
            try:
                spec = load_spec(overrides)
                check(spec)
                report = rehearse(spec, plan(spec), timeout_s=300)
                out = {"ok": report.ok, "violations": report.violations, "map": report.render()}
            except Exception as e:  # noqa: BLE001 - reported to the test
                out = {"ok": False, "violations": [f"{type(e).__name__}: {e}"], "map": ""}
            out.update({"overrides": overrides, "seconds": time.monotonic() - t})
            print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
