"""One folder per backend of the two engine axes (DESIGN.md, "Backends: three axes"): ``train/<name>/`` for
``trainer.backend``, ``rollout/<name>/`` for ``rollout.backend``. Each folder holds a torch-free ``descriptor.py``
(its rules, memory and cost terms, the options ``--auto`` may try, how it is launched: the object the registry line
in rlhf/spec/backends.py points at), its engine and, for rollout engines, its actor class. What engines share (the
Protocols, weight sync, process groups) is rlhf.engines.

Nothing here is imported on import: a vLLM engine's interpreter (a venv of its own) imports its folder's actor and
must not pull in the trainer's dependencies.
"""
