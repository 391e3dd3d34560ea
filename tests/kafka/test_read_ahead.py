"""The read-ahead's bounds: answers kept by key, at most max_entries (oldest dropped), no read beyond the
limit cap, a failed read ahead is no answer, nothing starts once closed."""

from __future__ import annotations

import threading

from topiclake.kafka.read_ahead import MAX_LIMIT_BYTES, Answer, ReadAhead


def _answer(offset: int) -> Answer:
    return Answer(b"x" * offset, 100, 0, 0.8, offset + 10)


def test_an_answer_is_taken_once_by_its_key_and_the_oldest_are_dropped() -> None:
    ahead = ReadAhead(max_entries=2, threads=1)
    try:
        gate = threading.Event()
        ahead.start(("t", 0, 0, 1000), lambda: gate.wait(10) and _answer(0))  # still reading: waited for
        ahead.start(("t", 0, 10, 1000), lambda: _answer(10))
        ahead.start(("t", 0, 20, 1000), lambda: _answer(20))  # a third: the oldest (offset 0) is dropped
        gate.set()
        assert ahead.take(("t", 0, 0, 1000)) is None
        assert ahead.take(("t", 0, 10, 999)) is None  # another limit: another fetch
        assert ahead.take(("t", 0, 10, 1000)) == _answer(10)
        assert ahead.take(("t", 0, 10, 1000)) is None  # taken once
        assert ahead.take(("t", 0, 20, 1000)) == _answer(20)
        assert (ahead.started, ahead.hits) == (3, 2)
    finally:
        ahead.close()


def test_big_limits_failed_reads_and_a_closed_read_ahead_give_no_answer() -> None:
    ahead = ReadAhead(threads=1)
    ahead.start(("t", 0, 0, MAX_LIMIT_BYTES + 1), lambda: _answer(0))
    assert ahead.started == 0

    def fails() -> Answer:
        raise OSError("gone")

    ahead.start(("t", 0, 5, 1000), fails)
    assert ahead.take(("t", 0, 5, 1000)) is None  # the fetch reads again and answers the error itself
    ahead.close()
    ahead.start(("t", 0, 7, 1000), lambda: _answer(7))
    assert ahead.take(("t", 0, 7, 1000)) is None
