"""Test-wide set-up, before any test module imports ray.

- Ray's public switch that keeps the clusters the tests start (private clusters, ray.cluster_utils nodes in
  subprocesses) on 127.0.0.1. Ray reads it once, at import, so this is the earliest safe place for the test session
  (rlhf-run sets it itself before it imports ray).
- Helpers shared by test folders (tests/sockets_helper.py) importable from every test.
- ``ray_cluster``: one private Ray cluster for the session (4 CPUs, 127.0.0.1), shared by every folder's tests
  that need one (tests/launch/test_realize.py keeps its own, module-scoped, for its own teardown); a test that asks
  for it is in the Ray tier.
- The tiers (README, "Tests"): ``pytest -q`` runs unit tests and the end-to-end runs the local executor hosts;
  ``pytest -q -m "ray or learning"`` what only Ray shows, and the run that proves RL learns (``learning``: the
  embedded default, the largest single test, moved there to keep the default tier within its 8 minutes).
- The default tier's processes compute on one thread each (``OMP_NUM_THREADS=1`` unless set): its two workers
  (addopts ``-n 2``) already fill two cores, and a second thread per process only contends with the other worker
  (measured on the 2-core machine, same tree: 618 s with torch's default threads, 575 s with one). The Ray tier's
  actors get their threads from their placement, as in a run.
"""

import os
import sys

import pytest

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, os.path.dirname(__file__))


def _hypothesis_profiles() -> None:
    """Property-based tests in the suite draw the same examples every run (``derandomize``), with no per-example
    deadline (a wall-clock bound that a loaded machine breaks) and no example database (CI starts fresh);
    ``HYPOTHESIS_PROFILE=fuzz`` (scripts/fuzz.sh) draws new ones each run."""
    try:
        from hypothesis import settings
    except ImportError:  # not a dev install: no property tests run
        return
    settings.register_profile("ci", derandomize=True, deadline=None, database=None, print_blob=True)
    settings.register_profile("fuzz", derandomize=False, deadline=None, database=None, print_blob=True)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


_hypothesis_profiles()


def pytest_configure(config):
    # before any test module imports torch (collection comes after), in the controller and in each xdist worker
    if config.getoption("markexpr") == "not ray and not learning":
        os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from rlhf.launch.cluster import start_or_attach
    from rlhf.spec.schema import RaySpec

    started = not ray.is_initialized()
    start_or_attach(RaySpec(num_cpus=4))
    yield
    if started:
        ray.shutdown()


# The modules that took longest in the last measured runs of each tier (--durations), heaviest first.
# The suite runs in two pytest-xdist workers, a whole module each at a time (--dist loadfile, in this order): heavy
# modules first and the many quick ones last let both workers finish together, where a heavy module drawn last would
# leave one worker alone with it for minutes. Any order is correct; this one is only faster. Each tier takes the
# modules of this list it runs, in this order.
HEAVIEST_FIRST = (
    # the second tier (pytest -m "ray or learning")
    "tests/launch/test_rehearsal.py",
    "tests/cli/test_run_lifecycle.py",
    "tests/pipelines/test_grpo_learns.py",
    "tests/pipelines/test_faults.py",
    "tests/pipelines/test_fsdp2_pipelines.py",
    "tests/pipelines/test_weight_sync.py",
    "tests/pipelines/test_lora_adapter_sync.py",
    "tests/pipelines/test_stalled_roles.py",
    "tests/pipelines/test_weight_sync_tied.py",
    "tests/pipelines/test_supervised_pipelines.py",
    "tests/launch/test_local_executor_parity.py",
    "tests/launch/test_two_node_cluster.py",
    "tests/pipelines/test_weight_sync_stress.py",
    "tests/pipelines/test_rl_pipeline.py",
    "tests/launch/test_ray_cluster_launcher.py",
    "tests/backends/test_train_backends.py",
    "tests/backends/test_sequence_parallel_engines.py",
    "tests/pipelines/test_sequence_parallel_run.py",
    # the default tier (pytest -q), by its measured module times (2026-12-08)
    "tests/cli/test_sweeps.py",
    "tests/docs/test_readme_commands.py",
    "tests/pipelines/test_full_disk.py",
    "tests/cli/test_cli.py",
    "tests/tracking/test_trackers_in_runs.py",
    "tests/pipelines/test_kill_resume.py",
    "tests/serve/test_serve_load_bench.py",
    "tests/pipelines/test_rl_kill_resume.py",
    "tests/cli/test_resume_refuses_changes.py",
    "tests/pipelines/test_checkpoint_damage.py",
    "tests/cli/test_clean_exit.py",
    "tests/planning/test_auto.py",
)


_gone = [p for p in HEAVIEST_FIRST if not os.path.exists(os.path.join(os.path.dirname(os.path.dirname(__file__)), p))]
if _gone:
    raise RuntimeError(f"tests/conftest.py HEAVIEST_FIRST names {_gone}, which no longer exist: update the list")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m selection, which then sees the tier marks added here
def pytest_collection_modifyitems(config, items):
    """The tiers: a test that asks for the session's Ray cluster (``ray_cluster``) is in the Ray tier (``ray``
    mark), whatever its module says; ``pytest -q`` runs the rest but the learning run (addopts: -m "not ray and not
    learning"), ``pytest -q -m "ray or learning"`` the Ray tier and the learning run. Then whole modules reordered (a
    module's tests stay together, in their order, so its module-scoped fixtures are set up once): the heaviest listed
    above first, then modules with end-to-end (``slow``) tests, then the rest."""
    for item in items:
        if "ray_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ray)
    first: dict[str, int] = {}
    band: dict[str, tuple[int, int]] = {}
    for i, item in enumerate(items):
        path = item.nodeid.split("::")[0]
        first.setdefault(path, i)
        rank = (0, HEAVIEST_FIRST.index(path)) if path in HEAVIEST_FIRST else (
            1 if item.get_closest_marker("slow") else 2, 0)
        band[path] = min(band.get(path, rank), rank)
    items.sort(key=lambda it: (band[p := it.nodeid.split("::")[0]], first[p]))  # stable: a module's own order kept
