"""The shell blocks the docs pages mark ``<!-- runnable ... -->`` run as shown: each ``$`` line runs (in an empty
folder), the lines under it must appear in its output in order (``...`` stands for text left out), and it exits
non-zero exactly when what it shows starts with ``error:``."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ceilings import ceiling

DOCS = Path(__file__).resolve().parents[2] / "docs"
BIN = Path(sys.executable).parent
MARK = "<!-- runnable"


def _blocks() -> list[tuple[str, str, list[str]]]:
    """(page, command, the lines shown under it) for every $ line of every marked block."""
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if not line.startswith(MARK):
                continue
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block = []
            while j < len(lines) and (lines[j].startswith("    ") or not lines[j].strip()):
                block.append(lines[j][4:])
                j += 1
            while block and not block[-1].strip():
                block.pop()
            for k, text in enumerate(block):
                if text.startswith("$ "):
                    shown = []
                    for out in block[k + 1 :]:
                        if out.startswith("$ "):
                            break
                        shown.append(out)
                    found.append((str(page.relative_to(DOCS)), text[2:], shown))
    return found


def _appears_in_order(shown: list[str], printed: list[str]) -> str | None:
    """The first shown line not found (in order) in ``printed``; ``...`` in a shown line matches any text."""
    at = 0
    for want in (s for s in shown if s.strip()):
        parts = [p for p in want.strip().split("...") if p.strip()]
        while at < len(printed):
            line, pos = printed[at], 0
            at += 1
            for part in parts:
                pos = line.find(part.strip(), pos)
                if pos < 0:
                    break
                pos += len(part.strip())
            else:
                break
        else:
            return want
    return None


BLOCKS = _blocks()


def test_the_docs_mark_some_blocks_runnable():
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize(("page", "command", "shown"), BLOCKS, ids=[f"{p}:{c[:40]}" for p, c, _ in BLOCKS])
def test_a_runnable_block_prints_what_the_page_shows(page, command, shown, tmp_path):
    argv = shlex.split(command)
    r = subprocess.run(
        [str(BIN / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=tmp_path, timeout=ceiling(120)
    )
    printed = (r.stdout + r.stderr).splitlines()
    fails = bool(shown) and shown[0].startswith("error:")
    assert (r.returncode != 0) == fails, f"{page}: {command} exited {r.returncode}\n{r.stderr[-2000:]}"
    missing = _appears_in_order(shown, printed)
    assert missing is None, f"{page}: {command} did not print {missing!r}; it printed:\n" + "\n".join(printed[-30:])


def test_the_check_finds_a_missing_or_misordered_line_and_honours_elisions():
    assert _appears_in_order(["error: a ... c"], ["error: a b c"]) is None
    assert _appears_in_order(["x"], ["a"]) == "x"
    assert _appears_in_order(["b", "a"], ["a", "b"]) == "a"
