"""Run in every Ray worker process of a private cluster before any task or actor (Ray's public
``worker_process_setup_hook``): SIGTERM is unblocked again.

rlhf.launch.cluster starts a private cluster's GCS, raylet and agents with SIGTERM blocked, so a SIGTERM sent to the
whole process group (``timeout``, SLURM, Kubernetes, ``kill -- -PGID``) reaches only the driver, which stops at the
next step boundary with a checkpoint as after a single SIGTERM. The raylet starts its workers with the mask it
inherited; a worker (and whatever it starts: vLLM's engine process, DataLoader workers) must answer SIGTERM as
usual, because libraries end their helper processes with it. Workers run in process groups of their own, so the
group signal does not reach them either way. Imports nothing but the standard library, so it costs a worker
nothing and cannot fail to import in either venv."""

from __future__ import annotations

import signal


def unblock_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
