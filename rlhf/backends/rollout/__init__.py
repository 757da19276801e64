"""Rollout backends (``rollout.backend``), one folder each: hf/, vllm/."""
