"""``rollout.backend=vllm``: vLLM engines in an interpreter of their own.

    descriptor.py  this backend as rlhf.backends.contract.rollout.RolloutBackend (no torch, no vllm import)
    engine.py      VLLMEngine over vLLM's LLM
    actor.py       VLLMRolloutActor, the Ray actor hosting it (started with the vLLM interpreter)
    worker.py      the worker extension that receives weights inside vLLM's workers
    logprobs.py    the logits processor that returns tempered log-probabilities
    placement.py   where vLLM's workers go (and the rehearsal's stand-in)
    version.py     the vLLM versions this engine supports
    config.py      VLLMSpec, its own keys ``rollout.vllm.*`` (its registry line names it; the schema adds it)

Imports nothing: the vLLM interpreter imports actor.py alone.
"""
