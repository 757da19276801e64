"""The contract every backend keeps: the training Protocols and their base (training.py), the rollout Protocols and
their base (rollout.py), and what a rollout's log-probs mean (logprob_meaning.py). Imports no torch."""
