"""Spare files: created ahead by a background thread, written into without a create, gone when forgotten,
and never a lost write when one was deleted (vacuumed) before use."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from topiclake.platform.log.spare_files import SpareFiles, write_new


def _wait_for(predicate: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def test_spares_are_made_ahead_and_taken(tmp_path: Path) -> None:
    spares = SpareFiles(per_directory=3)
    assert spares.take(str(tmp_path), "p-", ".x") is None  # none yet: the first call asks for them
    _wait_for(lambda: len(list(tmp_path.iterdir())) == 3)
    made = {p.name for p in tmp_path.iterdir()}
    assert len(made) == 3 and all(n.startswith("p-") and n.endswith(".x") for n in made)
    taken = spares.take(str(tmp_path), "p-", ".x")
    assert taken is not None and os.path.basename(taken) in made and os.path.getsize(taken) == 0
    mode = os.stat(taken).st_mode  # made by mknod: a plain file its writer can open, as an open made it
    assert stat.S_ISREG(mode) and stat.S_IMODE(mode) & 0o600 == 0o600
    _wait_for(lambda: len(list(tmp_path.iterdir())) == 4)  # refilled
    spares.forget(str(tmp_path))
    assert {p.name for p in tmp_path.iterdir()} == {os.path.basename(taken)}  # only the one handed out


def test_write_new_survives_a_spare_deleted_before_use(tmp_path: Path) -> None:
    first = write_new(str(tmp_path), "f-", ".bin", b"one")
    assert Path(first).read_bytes() == b"one"
    _wait_for(lambda: len(list(tmp_path.iterdir())) > 1)
    for p in tmp_path.iterdir():  # a vacuum deletes every unreferenced file, spares included
        if p.stat().st_size == 0:
            p.unlink()
    second = write_new(str(tmp_path), "f-", ".bin", b"two" * 1000)
    assert Path(second).read_bytes() == b"two" * 1000 and second != first


def test_a_commit_over_many_folders_wakes_the_thread_once(tmp_path: Path) -> None:
    """A commit over 12 partitions takes a spare in each of 12 folders: the refilling thread is woken once
    for all of them (each wake-up is a GIL hand-off), and refills every folder."""
    spares = SpareFiles(per_directory=2)
    folders = [tmp_path / f"p{i}" for i in range(12)]
    for folder in folders:
        folder.mkdir()
        spares.take(str(folder), "s-", ".x")

    def full() -> bool:
        return all(len(list(f.iterdir())) == 2 for f in folders)

    _wait_for(full)
    assert full()
    _wait_for(lambda: spares._asleep)  # the thread went back to sleep
    before = spares.wakeups
    with spares._cond:  # the commit's takes, one after the other, before the thread can run
        taken = [spares.take(str(folder), "s-", ".x") for folder in folders]
    assert all(taken) and spares.wakeups == before + 1
    _wait_for(lambda: all(len(list(f.iterdir())) == 3 for f in folders))
    assert all(len(list(f.iterdir())) == 3 for f in folders)  # 2 spares again, plus the one taken
