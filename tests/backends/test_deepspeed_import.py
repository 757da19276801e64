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
