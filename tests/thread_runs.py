"""Work on many threads at once, for the tests of concurrent producers (imported by name, as tests/
conftest.py imports tests/xdist_units.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def in_threads(n: int, work: Callable[[int], None], timeout_s: float = 120.0) -> list[BaseException]:
    """Run ``work(0)`` .. ``work(n - 1)`` on ``n`` threads at once; what they raised, and a ``TimeoutError``
    for each thread still running after ``timeout_s`` (empty: all ended well)."""
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    errors += [TimeoutError(f"{t.name} still running after {timeout_s} s") for t in threads if t.is_alive()]
    return errors
