"""Answer checks run in a child process, each under a deadline.

Symbolic checkers (sympy via math-verify) can run for ever on a hostile answer such as ``9^{9^{9^{9}}}``.
math-verify's own guard is ``signal.alarm``, which only works on the main thread of the main interpreter, and
rewards are computed in threads, Ray actors and HTTP handlers. A thread cannot be stopped once stuck, so the
checks run in a child interpreter instead: a check past its deadline gets the child killed (and a new one
started on the next call), and the caller is told it timed out.

    checker = CheckerProcess("rlhf.rewards.math_answer:check_math")
    checker.call(("\\boxed{4}", "4"), timeout_s=5.0)      # -> the function's result, or TIMED_OUT

A target module may define ``warm_up()``, run once before the child reports ready. The child speaks JSON lines
on stdin/stdout (arguments and results must be JSON values); it is started with ``subprocess`` rather than
``multiprocessing`` so that it works the same from any thread and inside Ray workers (no re-import of the
parent's ``__main__``, no fork of a threaded process).
"""

from __future__ import annotations

import importlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from rlhf.rewards.result import RewardError

TIMED_OUT = object()  # a check that ran past its deadline
START_TIMEOUT_S = 120.0  # the child imports sympy and friends before it answers; a cold start on a busy machine


class CheckError(Exception):
    """The checked function raised in the child (its message, as text)."""


class CheckerProcess:
    """One child process running ``target`` ("module:function"), one call at a time (calls from several threads
    queue on a lock)."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.timeouts = 0  # checks killed at their deadline, over this object's life
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()

    def call(self, args: Sequence[Any], timeout_s: float) -> Any:
        """``target(*args)`` in the child; TIMED_OUT past ``timeout_s``; :class:`CheckError` if it raised."""
        with self._lock:
            proc = self._ensure_started()
            line = json.dumps(list(args)) + "\n"
            try:
                proc.stdin.write(line.encode())
                proc.stdin.flush()
            except BrokenPipeError:
                self._stop()
                raise RewardError(f"answer checker {self.target} died; see its error above") from None
            reply = self._read_line(proc, timeout_s)
            if reply is None:
                self.timeouts += 1
                self._stop()  # the child is stuck inside the check: kill it, start afresh next time
                return TIMED_OUT
            msg = json.loads(reply)
            if "error" in msg:
                raise CheckError(msg["error"])
            return msg["result"]

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __del__(self) -> None:
        self._stop()

    def _ensure_started(self) -> subprocess.Popen:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        env = dict(os.environ)
        # The child must import what this process imports (an editable checkout, PYTHONPATH, a test folder).
        env["PYTHONPATH"] = os.pathsep.join(p or os.getcwd() for p in sys.path)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "from rlhf.rewards.checker_process import serve; serve()", self.target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        ready = self._read_line(self._proc, START_TIMEOUT_S)
        if ready is None or json.loads(ready).get("ready") is not True:
            detail = json.loads(ready).get("error", "") if ready else f"no answer in {START_TIMEOUT_S:.0f} s"
            self._stop()
            raise RewardError(f"answer checker {self.target} did not start: {detail}")
        return self._proc

    @staticmethod
    def _read_line(proc: subprocess.Popen, timeout_s: float) -> bytes | None:
        deadline = time.monotonic() + timeout_s
        fd = proc.stdout.fileno()
        buf = b""
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:  # the child exited (crashed, or killed from outside)
                return json.dumps({"error": "the checker process exited"}).encode()
            buf += chunk
        return buf

    def _stop(self) -> None:
        proc, self._proc = getattr(self, "_proc", None), None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc is not None:
            for f in (proc.stdin, proc.stdout):
                if f is not None:
                    f.close()


def serve() -> None:
    """The child's loop: import the target named in argv[1], then one JSON line in, one JSON line out."""
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the checked code prints must not corrupt the protocol

    def send(msg: dict[str, Any]) -> None:
        out.write((json.dumps(msg) + "\n").encode())
        out.flush()

    module_name, _, name = sys.argv[1].partition(":")
    try:
        module = importlib.import_module(module_name)
        fn = getattr(module, name)
        # Imports and caches a first check would pay for (sympy, a task registry) are paid before "ready", so
        # they do not count against the first check's deadline.
        warm_up = getattr(module, "warm_up", None)
        if warm_up is not None:
            warm_up()
    except Exception as e:  # a missing extra: say so in the parent
        send({"error": f"{type(e).__name__}: {e}"})
        return
    send({"ready": True})
    for line in sys.stdin.buffer:
        try:
            send({"result": fn(*json.loads(line))})
        except Exception as e:
            send({"error": f"{type(e).__name__}: {e}"})
