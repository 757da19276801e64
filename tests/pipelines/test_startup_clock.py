"""The start-up line's launch phase: the first job of a process counts from the process start, a later job of the
same process (a multirun's next job) from its own start, not from the sweep's."""

from __future__ import annotations

import time

from rlhf.pipelines import startup_clock


def test_a_later_job_in_the_same_process_times_its_launch_from_its_own_start(monkeypatch):
    monkeypatch.setattr(startup_clock, "_jobs_started", 0)
    monkeypatch.setattr(startup_clock, "_job_start", None)
    monkeypatch.setattr(time, "time", lambda: 1_000_000.0)

    startup_clock.mark_job_start()  # the first job: the process start is its launch's start
    assert startup_clock._job_start is None

    startup_clock.mark_job_start()  # the second job, 0 s ago by the patched clock
    assert startup_clock._job_start == 1_000_000.0
    assert startup_clock.process_age_s() == 0.0


def test_the_first_job_counts_from_the_process_start(monkeypatch):
    monkeypatch.setattr(startup_clock, "_jobs_started", 0)
    monkeypatch.setattr(startup_clock, "_job_start", None)
    startup_clock.mark_job_start()
    # the test process has run longer than this test: a launch time from the process start is above zero
    assert startup_clock.process_age_s() > 0.0
