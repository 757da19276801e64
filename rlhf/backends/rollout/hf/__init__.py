"""``rollout.backend=hf``: transformers generate.

descriptor.py  this backend as rlhf.backends.contract.rollout.RolloutBackend (no torch import)
engine.py      HFEngine, the engine
actor.py       HFRolloutWorker, the Ray actor hosting it in the trainer's venv
in_policy.py   ``rollout.hf.in_policy``: a policy rank generating with the module it trains
config.py      HFRolloutSpec, its own keys ``rollout.hf.*`` (its registry line names it; the schema adds it)
"""
