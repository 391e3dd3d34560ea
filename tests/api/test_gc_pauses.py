"""The gateway freezes its startup objects out of the garbage collector (issue 17: the p99 tail)."""

from __future__ import annotations

import gc

from topiclake.api import gc_pauses


def test_settle_freezes_once() -> None:
    gc_pauses.settle()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    gc_pauses.settle()  # idempotent: a second app in the same process freezes nothing more
    assert gc.get_freeze_count() == frozen
