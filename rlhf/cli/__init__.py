"""Entry points: rlhf-run (the Hydra app), rlhf-plan, rlhf-recipes."""
