"""What backends share at run time: process groups (distributed.py), the optimizer and schedule (optim.py), the
step window (step_window.py), full weights out of a sharded model (weights.py), the worker, rollout-actor and
rollout-engine bases (worker_base.py, rollout_actor.py, rollout_engine.py) and the heartbeat (liveness.py). Nothing
is imported here: a vLLM engine's interpreter imports rollout_actor.py alone."""
