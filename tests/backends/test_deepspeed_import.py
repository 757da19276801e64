"""rlhf.backends.train.deepspeed.deepspeed_import: what importing DeepSpeed leaves on a console."""

import subprocess
import sys

from ceilings import ceiling

# A process whose console logs INFO to stdout, as Hydra's does for rlhf-run (the local executor's ranks share it).
_SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="[%(name)s] %(message)s")
from rlhf.backends.train.deepspeed.deepspeed_import import SHM_COMM_OP, import_deepspeed
import_deepspeed()
import deepspeed.ops
print("shm op compatible:", deepspeed.ops.__compatible_ops__[SHM_COMM_OP])
"""


def test_importing_deepspeed_prints_no_gcc_command_of_its_op_probe_and_marks_the_shm_op_unbuildable():
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=ceiling(120), check=True
    ).stdout
    assert "shm op compatible: False" in out, out
    assert "gcc" not in out and "[compilers." not in out, out


# Another thread writes numbered lines to stderr (as the local executor's driver prints its run's lines while a
# thread imports DeepSpeed); every line must reach the console, and no op is probed that nobody asked for.
_CONSOLE_SCRIPT = """
import sys, threading
done = threading.Event()
def lines():
    i = 0
    while not done.is_set() or i < 50:
        print(f"line {i}", file=sys.stderr, flush=True)
        i += 1
        done.wait(0.001)
    print(f"lines {i}", file=sys.stderr, flush=True)
t = threading.Thread(target=lines)
t.start()
from rlhf.backends.train.deepspeed.deepspeed_import import import_deepspeed
ds = import_deepspeed()
done.set()
t.join()
print("probed:", sorted(dict(ds.ops.__compatible_ops__)))
"""


def test_importing_deepspeed_beside_a_printing_thread_loses_none_of_its_lines_and_probes_no_op():
    run = subprocess.run(
        [sys.executable, "-c", _CONSOLE_SCRIPT], capture_output=True, text=True, timeout=ceiling(120), check=True
    )
    printed = [line for line in run.stderr.splitlines() if line.startswith("line ")]
    total = int(next(line for line in run.stderr.splitlines() if line.startswith("lines ")).split()[1])
    assert printed == [f"line {i}" for i in range(total)], run.stderr[-2000:]
    # async_io's probe (the one that points stderr at a file while it compiles) never ran
    assert "probed: ['deepspeed_shm_comm']" in run.stdout, run.stdout
