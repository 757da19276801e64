"""The toy rollout backend's folder (``rollout.backend=toy``): descriptor.py, its engine object engine.py and the actor
hosting it, actor.py."""
