"""What a second Ctrl-C says it abandoned: the calls the driver was waiting on (rlhf.waits.waiting_on), a worker
that left its heartbeat unanswered first, and the trackers' status as they record it."""

from __future__ import annotations

import threading
import time

from ceilings import ceiling, wait_until

from rlhf import waits
from rlhf.errors import RunInterrupted
from rlhf.futures import LocalRef
from rlhf.pipelines.interrupts import Interrupts
from rlhf.waits import Call, wait, waiting_on


def test_a_pending_local_call_is_named_with_what_it_runs_and_forgotten_once_answered():
    ref = LocalRef("policy")
    calls = [Call(ref, "policy", 0), Call(LocalRef.of(lambda: 1), "policy", 1)]
    waiter = threading.Thread(target=wait, args=(calls, "train_step", ceiling(60)))
    waiter.start()
    said = wait_until(waiting_on, "the wait registered", 30)
    assert said.startswith("role policy rank 0 in train_step (for ")
    assert "rank 1" not in said  # answered already
    ref.run(lambda: 2)
    waiter.join(ceiling(30))
    assert not waiter.is_alive()
    assert waiting_on() == ""


def test_an_actor_silent_to_its_heartbeat_is_named_first_with_its_silence_and_pid(monkeypatch):
    busy, silent = object(), object()
    now = time.monotonic()
    monkeypatch.setitem(waits._SEEN, busy, {"pid": 11, "_at": now})
    monkeypatch.setitem(waits._SEEN, silent, {"pid": 22, "_at": now - 12})
    monkeypatch.setitem(waits._SENT, silent, "its outstanding heartbeat")
    calls = [Call("r0", "policy", 0, actor=busy), Call("r1", "policy", 1, actor=silent)]
    monkeypatch.setitem(waits._WAITING, -1, ("train_step", lambda: calls, now - 12))
    said = waiting_on()
    first, second = said.split("; ")
    assert first.startswith("role policy rank 1 in train_step (no answer to a heartbeat for 1")
    assert first.endswith("s, pid 22)")
    assert second.startswith("role policy rank 0 in train_step (for ")


def test_the_at_once_message_names_the_abandoned_wait_and_the_trackers_status(capsys, monkeypatch):
    exits = []
    monkeypatch.setattr("os._exit", exits.append)
    stop = Interrupts(lambda: "resume with: rlhf-run --resume R", lambda: "the trackers' runs are marked KILLED")
    stop.abandoned = "role policy rank 1 in train_step (no answer to a heartbeat for 9 s, pid 22)"
    stop._exit_now("second SIGINT")
    err = capsys.readouterr().err
    assert "second SIGINT: stopped at once; abandoned the step under way (waiting on role policy rank 1" in err
    assert "the trackers' runs are marked KILLED" in err and "FAILED" not in err
    assert exits == [130]


def test_the_interrupted_line_names_what_a_second_signal_abandoned():
    e = RunInterrupted("second SIGINT", 3, None, "R")
    e.abandoned = "role rollout rank 0 in generate (for 4 s)"
    assert e.line().startswith("interrupted at step 3 (abandoned waiting on role rollout rank 0 in generate (for 4 s))")


def test_a_second_signal_between_two_calls_names_what_the_teardown_waits_on_when_it_leaves(capsys, monkeypatch):
    exits = []
    monkeypatch.setattr("os._exit", exits.append)
    stop = Interrupts()
    assert stop.abandoned == ""  # the signal came while the driver waited on nothing
    stuck = [Call("r0", "rollout", 0)]
    monkeypatch.setitem(waits._WAITING, -1, ("shutdown", lambda: stuck, time.monotonic() - 3))
    stop._exit_now("second SIGINT")
    err = capsys.readouterr().err
    assert "abandoned the step under way (waiting on role rollout rank 0 in shutdown (for 3 s))" in err
    assert exits == [130]
