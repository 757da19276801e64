"""Runtime compatibility with OpenRLHF: a user's reward, agent and environment files written for OpenRLHF import
``openrlhf.*`` names, which resolve to rlhf's own implementations when no real OpenRLHF is installed
(:mod:`rlhf.compat.openrlhf`). Imported by rewards/, agents/ and the preflight, so it sits low and imports nothing
of theirs at import time. Converting OpenRLHF or veRL *command lines* into recipes is a CLI verb and lives with the
CLI: :mod:`rlhf.importers`."""
