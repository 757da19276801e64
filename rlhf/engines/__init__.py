"""Training and rollout engines behind one small protocol each."""
