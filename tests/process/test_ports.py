"""free_port: never the same port twice, in one process or across processes (pytest-xdist workers)."""

from __future__ import annotations

import socket
import subprocess
import sys

from topiclake.process import ports
from topiclake.process.ports import free_port


def test_ports_are_distinct_bindable_and_outside_the_ephemeral_range() -> None:
    drawn = [free_port() for _ in range(200)]
    assert len(set(drawn)) == len(drawn)
    low, high = ports._ephemeral_range()
    assert all(ports.LOWEST_PORT <= p <= 65535 and not low <= p <= high for p in drawn)
    with socket.socket() as s:
        s.bind(("127.0.0.1", drawn[-1]))  # free when handed out


def test_a_port_in_use_is_never_handed_out() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", free_port()))
        taken = busy.getsockname()[1]
        ports._handed_out.discard(taken)  # as if another program had bound it, not this helper
        (ports._reservations() / str(taken)).unlink()
        ports._order.append(taken)  # offered next
        assert free_port() != taken


def test_two_processes_never_draw_the_same_port() -> None:
    code = "from topiclake.process.ports import free_port; print(*[free_port() for _ in range(300)])"
    mine = {free_port() for _ in range(20)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(2)
    ]
    outs = [p.communicate(timeout=60)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    first, second = ({int(p) for p in out} for out in outs)
    assert len(first) == len(second) == 300
    assert not first & second
    assert not (first | second) & mine
