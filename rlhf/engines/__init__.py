"""What every engine backend shares (the backends themselves are folders of rlhf.backends): the two Protocols
(training.py: TrainBackend, TrainEngine, FrozenEngine; protocol.py: RolloutBackend, RolloutEngine), the registry
loaders (backends.py, rollout_backends.py), the weight sync, process groups (distributed.py), the common part of a
rollout engine's actor (rollout_actor.py) and of every worker (worker_base.py), the heartbeat (liveness.py)."""
