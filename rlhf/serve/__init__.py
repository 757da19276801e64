"""Standalone services: the reward-model HTTP server behind ``rlhf-serve-rm``."""
