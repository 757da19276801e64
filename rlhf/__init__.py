"""rlhf: a declarative, Hydra-configured RLHF training platform."""

__version__ = "0.1.0"
