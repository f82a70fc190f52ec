"""File changes: a snapshot before the run, one after, and exactly what differs between them."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from opencode_gateway.runs import files
from opencode_gateway.runs.files import FileChange, Snapshot, Unlisted


def take(root: Path, max_file_bytes: int = 1024) -> Snapshot:
    return Snapshot.take(root, max_file_bytes=max_file_bytes)


def changed(before: Snapshot, after: Snapshot) -> tuple[FileChange, ...]:
    changes, notes = before.changes(after)
    assert notes == ()
    return changes


def test_created_modified_and_deleted_files_with_their_diffs(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "keep.py").write_text("a = 1\nb = 2\n")
    (tmp_path / "same.txt").write_text("untouched\n")
    (tmp_path / "old.txt").write_text("bye\n")
    before = take(tmp_path)
    (tmp_path / "src" / "keep.py").write_text("a = 1\nb = 3\n")
    (tmp_path / "old.txt").unlink()
    (tmp_path / "new.txt").write_text("hello")
    changes = changed(before, take(tmp_path))
    assert changes == (
        FileChange(
            "new.txt", "created", "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n\\ No newline at end of file\n"
        ),
        FileChange("old.txt", "deleted", "--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"),
        FileChange(
            "src/keep.py", "modified", "--- a/src/keep.py\n+++ b/src/keep.py\n@@ -1,2 +1,2 @@\n a = 1\n-b = 2\n+b = 3\n"
        ),
    )


def test_a_file_rewritten_with_the_same_bytes_is_not_a_change(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("same\n")
    before = take(tmp_path)
    (tmp_path / "a.txt").write_text("same\n")
    os.utime(tmp_path / "a.txt", ns=(1, 1))
    assert changed(before, take(tmp_path)) == ()


def test_binary_and_oversized_files_are_listed_without_a_diff(tmp_path: Path) -> None:
    (tmp_path / "blob.bin").write_bytes(b"\x00\x01")
    (tmp_path / "big.txt").write_text("x" * 2000)
    before = take(tmp_path)
    (tmp_path / "blob.bin").write_bytes(b"\x00\x02")
    (tmp_path / "big.txt").write_text("y" * 2001)
    assert changed(before, take(tmp_path)) == (
        FileChange("big.txt", "modified", None),
        FileChange("blob.bin", "modified", None),
    )


def test_version_control_folders_are_not_walked(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    before = take(tmp_path)
    (tmp_path / ".git" / "index").write_text("changed by git")
    assert changed(before, take(tmp_path)) == ()


def test_symlinks_are_compared_by_target_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not part of the workdir\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(outside)
    before = take(work)
    (outside / "secret.txt").write_text("changed\n")
    assert changed(before, take(work)) == ()
    (work / "link").unlink()
    (work / "link").symlink_to(tmp_path)
    assert changed(before, take(work)) == (
        FileChange(
            "link",
            "modified",
            f"--- a/link\n+++ b/link\n@@ -1 +1 @@\n"
            f"-{outside}\n\\ No newline at end of file\n+{tmp_path}\n"
            "\\ No newline at end of file\n",
        ),
    )


def test_a_tree_with_too_many_files_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "MAX_FILES", 3)
    for name in "abcd":
        (tmp_path / name).write_text(name)
    with pytest.raises(Unlisted, match="holds over 3 files"):
        take(tmp_path)


def test_past_the_memory_budget_files_are_compared_by_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_KEPT_BYTES", 10)
    (tmp_path / "a.txt").write_text("0123456789")
    (tmp_path / "b.txt").write_text("kept? no")
    before = take(tmp_path)
    (tmp_path / "b.txt").write_text("changed!")
    assert [c.change for c in changed(before, take(tmp_path))] == ["modified"]


def test_fifos_sockets_and_devices_are_listed_never_opened(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "before.fifo")  # a read would block forever: no writer ever comes
    before = take(tmp_path)
    os.mkfifo(tmp_path / "made-by-the-agent.fifo")
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "agent.sock"))
        changes = changed(before, take(tmp_path))
    assert changes == (FileChange("agent.sock", "created", None), FileChange("made-by-the-agent.fifo", "created", None))


def test_a_file_swapped_for_a_fifo_after_its_lstat_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a.txt").write_text("x")
    real_lstat = Path.lstat

    def lstat_then_swap(path: Path) -> os.stat_result:
        info = real_lstat(path)
        if path.name == "a.txt":  # the agent's race: a regular file at lstat, a FIFO at open
            path.unlink()
            os.mkfifo(path)
        return info

    monkeypatch.setattr(Path, "lstat", lstat_then_swap)
    assert take(tmp_path).entries["a.txt"].content is None


def test_a_walk_past_its_deadline_stops(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(Unlisted, match="took longer than the run's timeout"):
        Snapshot.take(tmp_path, max_file_bytes=1024, deadline=time.monotonic() - 1)


def test_diffs_end_by_the_deadline_and_each_is_cut_at_its_cap(tmp_path: Path) -> None:
    """difflib takes minutes on a file of many repeated lines changed throughout: the run's
    deadline ends the worker that diffs, and the files are listed without their diffs."""
    slow_before = "".join(f"{i % 150}\n" for i in range(60_000))
    slow_after = "".join(f"{i * 7 % 150}\n" for i in range(60_000))
    (tmp_path / "slow.txt").write_text(slow_before)
    (tmp_path / "long.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    before = take(tmp_path, max_file_bytes=1 << 20)
    (tmp_path / "slow.txt").write_text(slow_after)
    (tmp_path / "long.txt").write_text("".join(f"line {i} changed\n" for i in range(5000)))
    after = take(tmp_path, max_file_bytes=1 << 20)
    started = time.monotonic()  # the small diff has 10 s on a busy machine; the slow one takes minutes
    changes, notes = before.changes(after, deadline=started + 10, max_diff_bytes=2000)
    assert time.monotonic() - started < 10 + 5  # ended by the deadline (the worker killed), not minutes later
    long, slow = changes
    assert long.diff is not None and len(long.diff.encode()) <= 2000 + 100
    assert long.diff.endswith("\\ diff cut at 2,000 bytes (diff_max_bytes)\n") and long.diff.startswith(
        "--- a/long.txt"
    )
    assert (slow.path, slow.change, slow.diff) == ("slow.txt", "modified", None)
    assert notes == (
        "1 file diffs were not computed by the run's deadline (their files are listed without one)",
        "1 file diffs are cut at 2,000 bytes (diff_max_bytes)",
    )
