"""One folder per backend of the two engine axes (DESIGN.md, "Backends: three axes"): ``train/<name>/`` for
``trainer.backend``, ``rollout/<name>/`` for ``rollout.backend``. Each folder holds a torch-free ``descriptor.py``
(its rules, memory and cost terms, the options ``--auto`` may try, how it is launched: the object the registry line
in rlhf/spec/registry.py points at), its engine and, for rollout engines, its actor class. Beside them, what the
backends share: ``contract/`` (the two Protocols and what a rollout's log-probs mean), ``shared/`` (process groups,
the optimizer, the step window, full weights out of a sharded model, the worker and rollout-actor bases, the
heartbeat) and ``weight_sync/`` (the whole weight sync: the driver's side, the sender, the receivers, the wire
format, the adapter-only sync).

Nothing here is imported on import: a vLLM engine's interpreter (a venv of its own) imports its folder's actor and
must not pull in the trainer's dependencies.
"""
