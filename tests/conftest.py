"""Set before any test module imports ray: Ray's public switch that keeps the clusters the tests start (private
clusters, ray.cluster_utils nodes in subprocesses) on 127.0.0.1. Ray reads it once, at import, so this is the
earliest safe place for the test session (rlhf-run sets it itself before it imports ray)."""

import os

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
