"""The toy rollout backend's folder (``rollout.backend=toy``): descriptor.py and its engine actor, actor.py."""
