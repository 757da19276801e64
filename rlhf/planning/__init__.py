"""From the spec to a plan, without starting anything: where every role runs and what it needs (plan), the bytes
per device (memory), the estimated seconds per step (cost), the layouts that fit (auto, auto_recipe) and the static
checks before start-up (preflight). Pure: it imports neither Ray nor torch (tests/planning/test_pure.py), only the
spec and the backends' torch-free descriptors; rlhf.launch turns a plan into processes."""
