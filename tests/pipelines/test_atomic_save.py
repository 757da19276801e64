"""rlhf.atomic_save: a folder is renamed into place only when complete, and a full disk is one line with the sizes.

These are unit tests of the logic on the ordinary disk (a failing write is raised by hand); test_full_disk.py fills
a real (small, private) filesystem under real runs."""

from __future__ import annotations

import errno
import pickle
import shutil

import pytest

from rlhf.atomic_save import MIN_MARGIN_BYTES, DiskFull, atomic_dir, human_bytes, is_disk_full, with_margin
from rlhf.run_files.checkpoint import CheckpointManager


def test_a_complete_write_replaces_the_old_folder_and_leaves_no_temporary(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with atomic_dir(final) as tmp:
        assert tmp != final and tmp.parent == final.parent
        (tmp / "weights.bin").write_bytes(b"new")
    assert sorted(p.name for p in final.iterdir()) == ["weights.bin"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_a_write_that_fails_leaves_the_old_folder_as_it_was(tmp_path):
    final = tmp_path / "model"
    final.mkdir()
    (final / "weights.bin").write_bytes(b"old")
    with pytest.raises(RuntimeError, match="a bug"):
        with atomic_dir(final) as tmp:
            (tmp / "config.json").write_text("{}")
            raise RuntimeError("a bug")
    assert (final / "weights.bin").read_bytes() == b"old" and not (final / "config.json").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["model"]


def test_enospc_in_the_middle_leaves_no_folder_and_says_how_much_was_written(tmp_path):
    final = tmp_path / "model"
    with pytest.raises(DiskFull) as e:
        with atomic_dir(final, what="the final model") as tmp:
            (tmp / "config.json").write_text("x" * 3000)
            raise OSError(errno.ENOSPC, "No space left on device")
    assert not final.exists() and list(tmp_path.iterdir()) == []
    msg = str(e.value)
    assert msg.count("\n") == 0 and "saving the final model into" in msg and ".tmp-model" in msg
    assert "no space left on device" in msg and "more than the 0.00 MB written" in msg and " free" in msg


def test_a_save_that_fits_only_without_the_margin_is_refused_before_writing(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    need = free - 1024  # it would fit, just: the margin says no
    with pytest.raises(DiskFull) as e:
        with atomic_dir(tmp_path / "model", need_bytes=need, what="the final model"):
            raise AssertionError("nothing is written once refused")
    msg = str(e.value)
    margin = with_margin(need) - need
    assert margin >= MIN_MARGIN_BYTES
    assert f"it needs {human_bytes(need)} + {human_bytes(margin)} margin = {human_bytes(need + margin)}" in msg
    assert msg.startswith("not enough free space to save the final model") and not (tmp_path / "model").exists()


def test_disk_full_crosses_process_boundaries_with_its_hint():
    e = DiskFull("the model model/", "/run/.tmp-model", 6 * 2**20, 2**20, written=2**20).with_hint("resume with: X")
    back = pickle.loads(pickle.dumps(e))
    assert str(back) == str(e) and str(back).endswith("; resume with: X")


@pytest.mark.parametrize(
    "text",
    [
        "PytorchStreamWriter failed writing file data/0: file write failed",
        "basic_ios::clear: iostream error",
        'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })',
    ],
)
def test_full_disk_errors_without_errno_are_recognised(text):
    try:
        try:
            raise RuntimeError(text)
        except RuntimeError as inner:
            raise ValueError("role policy rank 0 failed in save_checkpoint") from inner
    except ValueError as outer:
        assert is_disk_full(outer)
    assert not is_disk_full(RuntimeError("a shape mismatch"))


def test_a_checkpoint_larger_than_the_free_space_is_refused_before_writing(tmp_path):
    m = CheckpointManager(tmp_path, verify="size")  # its manifest would hash the sparse file's zeros (minutes)
    tmp = m.begin(1)
    with open(tmp / "huge.bin", "wb") as f:  # sparse: twice the free space in apparent size, no real blocks
        f.truncate(2 * shutil.disk_usage(tmp_path).free)
    m.commit(tmp, 1, {"step": 1})
    refused = r"checkpoint of step 2 into \S+/step00000002: it needs .* \+ .* margin = .*, .* free$"
    with pytest.raises(DiskFull, match=refused):
        m.begin(2)
    assert not list(tmp_path.glob(".tmp-*")) and m.latest().name == "step00000001"


def test_saving_a_step_again_replaces_its_checkpoint(tmp_path):
    m = CheckpointManager(tmp_path)
    for payload in (b"first", b"second"):
        tmp = m.begin(3)
        (tmp / "state.bin").write_bytes(payload)
        m.commit(tmp, 3, {"step": 3})
    assert (m.latest() / "state.bin").read_bytes() == b"second" and not list(tmp_path.glob(".tmp-*"))
