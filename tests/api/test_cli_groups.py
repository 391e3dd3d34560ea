"""The real CLI (a subprocess) against a real gateway: ``consume --group`` and ``topiclake groups``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from gateway_harness import Gateway

from topiclake.errors import GroupNotFound

TIMEOUT_S = 60


def run(gateway_url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``topiclake ARGS`` with TOPICLAKE_URL pointing at the gateway."""
    return subprocess.run(
        [sys.executable, "-m", "topiclake.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        env={**os.environ, "TOPICLAKE_URL": gateway_url},
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


def fails(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def produce(url: str, topic: str, values: list[str], *args: str) -> None:
    """Produce the values, keyed by themselves (spread over the partitions) unless ARGS say otherwise."""
    lines = "".join(f"{v}\t{v}\n" for v in values)
    ok(run(url, "produce", topic, "--key-separator", "\\t", *args, stdin=lines))


def wait_for(what: str, check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Member:
    """A ``consume --group --follow`` subprocess whose stdout lines are collected by a thread."""

    def __init__(self, url: str, topic: str, group: str, *extra: str) -> None:
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "topiclake.cli", "consume", topic, "--group", group, "--follow"),
                *("--reset", "earliest", "--format", "%p %o %v\\n", "--max-records", "25"),
                *("--heartbeat-interval-ms", "100", "--session-timeout-ms", "5000", *extra),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "TOPICLAKE_URL": url},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> str:
        """Ctrl-C; returns stderr once it exited (0)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=TIMEOUT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._reader.join(10)
        assert self.proc.stderr is not None
        err = self.proc.stderr.read()
        assert self.proc.returncode == 0, err
        assert "Traceback" not in err, err
        return err


@contextmanager
def members(url: str, topic: str, group: str, n: int, *extra: str) -> Iterator[list[Member]]:
    started: list[Member] = []
    try:
        for _ in range(n):
            started.append(Member(url, topic, group, *extra))
            time.sleep(0.5)
        yield started
    finally:
        for m in started:
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(10)


def table(out: str) -> list[dict[str, str]]:
    """An aligned table (header line first) as dicts."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = lines[0].split()
    return [
        dict(zip(header, line.split(), strict=True)) for line in lines[1:] if len(line.split()) == len(header)
    ]


def test_two_members_split_four_partitions_and_print_every_record_once(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "4"))
    first = [f"a{i}" for i in range(400)]
    produce(url, "t", first)  # in the topic before the second member joins: it moves partitions mid-read
    with members(url, "t", "g", 2) as (a, b):

        def split() -> bool:
            try:
                d = gateway.broker.groups.describe("g")
            except GroupNotFound:  # no member joined yet (each starts a Python process)
                return False
            return d.state == "Stable" and sorted(len(m.assignment) for m in d.members) == [2, 2]

        wait_for("two members with two partitions each", split)
        wait_for("the first records", lambda: len(a.lines) + len(b.lines) >= len(first))
        second = [f"b{i}" for i in range(400)]
        produce(url, "t", second)
        wait_for("every record", lambda: len(a.lines) + len(b.lines) >= len(first) + len(second))
        described = table(ok(run(url, "groups", "describe", "g")))
        assert sorted(int(r["PARTITION"]) for r in described) == [0, 1, 2, 3]
        assert len({r["CONSUMER-ID"] for r in described}) == 2
        time.sleep(0.5)  # nothing more comes
        a_err, b_err = a.stop(), b.stop()
    printed = a.lines + b.lines
    assert sorted(line.split()[2] for line in printed) == sorted(first + second)  # every record once
    assert len({tuple(line.split()[:2]) for line in printed}) == len(printed)
    late = {int(line.split()[0]) for m in (a, b) for line in m.lines if line.split()[2].startswith("b")}
    assert late == {0, 1, 2, 3}
    for m in (a, b):  # after the split each member read its own two partitions
        assert len({int(line.split()[0]) for line in m.lines if line.split()[2].startswith("b")}) == 2
    assert "consumed" in a_err and "in group g" in b_err
    rows = table(ok(run(url, "groups", "lag", "g")))
    ends = {p: gateway.broker.list_offsets("t", p, "latest") for p in range(4)}
    assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LAG"])) for r in rows} == {
        p: (end, 0) for p, end in ends.items()
    }
    assert all(r["CONSUMER-ID"] == "-" for r in rows)  # both left the group
    assert gateway.broker.groups.describe("g").members == []


def test_without_follow_a_member_stops_at_the_end_and_resumes_from_its_commits(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "3"))
    produce(url, "t", [f"v{i}" for i in range(30)])
    assert ok(run(url, "consume", "t", "--group", "latest")) == ""  # auto.offset.reset=latest, as Kafka
    assert gateway.broker.groups.lag("latest") and all(
        x.lag == 0 for x in gateway.broker.groups.lag("latest")
    )
    out = ok(run(url, "consume", "t", "--group", "g", "--reset", "earliest"))
    assert sorted(out.split()) == sorted(f"v{i}" for i in range(30))
    assert ok(run(url, "consume", "t", "--group", "g", "--reset", "earliest")) == ""
    produce(url, "t", ["w1", "w2", "w3"])
    assert sorted(ok(run(url, "consume", "t", "--group", "g")).split()) == ["w1", "w2", "w3"]
    assert sorted(ok(run(url, "consume", "t", "--group", "latest")).split()) == ["w1", "w2", "w3"]
    # --max-messages commits exactly what was printed; --commit-before (at-most-once) too
    assert len(ok(run(url, "consume", "t", "--group", "m", "--from-beginning", "-c", "4")).split()) == 4
    assert sum(x.lag for x in gateway.broker.groups.lag("m")) == 33 - 4
    two = ok(run(url, "consume", "t", "--group", "m", "-c", "2", "--commit-before", "--json"))
    assert [json.loads(line)["topic"] for line in two.splitlines()] == ["t", "t"]
    assert sum(x.lag for x in gateway.broker.groups.lag("m")) == 33 - 6
    rest = ok(run(url, "consume", "t", "--group", "m"))
    assert len(rest.split()) == 33 - 6
    assert gateway.broker.groups.list_groups() and all(
        g.members == 0 for g in gateway.broker.groups.list_groups()
    )


def test_groups_describe_lag_reset_and_delete(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "2"))
    produce(url, "t", [f"v{i}" for i in range(10)], "--partition", "0")
    produce(url, "t", [f"w{i}" for i in range(10)], "--partition", "1")
    ends = {p: gateway.broker.list_offsets("t", p, "latest") for p in range(2)}
    assert ends == {0: 10, 1: 10}
    ok(run(url, "consume", "t", "--group", "g", "--from-beginning", "-c", "5"))
    committed = {tp[1]: c.offset for tp, c in gateway.broker.groups.committed("g").items()}
    assert sum(committed.values()) == 5

    listed = table(ok(run(url, "groups", "list")))
    assert listed == [{"GROUP": "g", "STATE": "Empty", "MEMBERS": "0", "ASSIGNOR": "cooperative-sticky"}]
    described = run(url, "groups", "describe", "g")
    assert "Consumer group 'g' has no active members." in described.stderr
    assert ok(described).splitlines()[0].split() == [
        *("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID"),
    ]
    expected = {p: (committed.get(p, "-"), ends[p], ends[p] - committed.get(p, 0)) for p in range(2)}
    for out in (described.stdout, ok(run(url, "groups", "lag", "g"))):
        rows = table(out)
        got = {
            int(r["PARTITION"]): (r["CURRENT-OFFSET"], int(r["LOG-END-OFFSET"]), int(r["LAG"])) for r in rows
        }
        assert got == {p: (str(c), e, lag) for p, (c, e, lag) in expected.items() if p in committed}
    lag_out = ok(run(url, "groups", "lag", "g"))
    assert lag_out.splitlines()[-1] == f"TOTAL-LAG {20 - 5}"
    as_json = json.loads(ok(run(url, "groups", "lag", "g", "--json")))
    assert as_json["total_lag"] == 15 and {x["partition"] for x in as_json["partitions"]} == set(committed)

    # reset: a dry run prints the plan and changes nothing; --execute applies it
    plan = run(url, "groups", "reset", "g", "--to-earliest", "--topic", "t")
    assert "Dry run: nothing changed" in plan.stderr
    rows = table(ok(plan))
    assert {int(r["PARTITION"]): r["NEW-OFFSET"] for r in rows} == {0: "0", 1: "0"}
    assert {tp[1]: c.offset for tp, c in gateway.broker.groups.committed("g").items()} == committed
    ok(run(url, "groups", "reset", "g", "--to-latest", "--topic", "t:0", "--execute"))
    assert gateway.broker.groups.committed("g")[("t", 0)].offset == ends[0]
    shifted = json.loads(ok(run(url, "groups", "reset", "g", "--shift-by", "-3", "--topic", "t:0", "--json")))
    assert shifted["dry_run"] is True and shifted["plan"][0]["new_offset"] == ends[0] - 3
    ok(run(url, "groups", "reset", "g", "--to-offset", "2", "--topic", "t", "--execute"))
    assert {tp[1]: c.offset for tp, c in gateway.broker.groups.committed("g").items()} == {0: 2, 1: 2}
    middle = run(url, "groups", "reset", "g", "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    assert {r["NEW-OFFSET"] for r in table(ok(middle))} == {"0"}

    # refused while the group has members: reset, delete, and a member with another assignor
    with members(url, "t", "g", 1) as (m,):
        wait_for("the member", lambda: gateway.broker.groups.describe("g").state == "Stable")
        fails(
            run(url, "groups", "reset", "g", "--to-latest", "--execute"),
            "GroupNotEmpty: group g has 1 active",
        )
        fails(run(url, "groups", "reset", "g", "--to-latest"), "GroupNotEmpty: ")
        fails(run(url, "groups", "delete", "g"), "GroupNotEmpty: ")
        fails(run(url, "consume", "t", "--group", "g", "--assignor", "range"), "InconsistentGroupProtocol: ")
        members_out = table(ok(run(url, "groups", "describe", "g", "--members")))
        assert [r["#PARTITIONS"] for r in members_out] == ["2"]
        state = table(ok(run(url, "groups", "describe", "g", "--state")))
        assert state[0]["STATE"] == "Stable" and state[0]["#MEMBERS"] == "1"
        wait_for("every record", lambda: len(m.lines) == 20)
        m.stop()
    assert {tp[1]: c.offset for tp, c in gateway.broker.groups.committed("g").items()} == ends
    assert "Deleted group g." in ok(run(url, "groups", "delete", "g"))
    fails(run(url, "groups", "describe", "g"), "GroupNotFound: group 'g' does not exist")
    fails(run(url, "groups", "delete", "g"), "GroupNotFound: ")
    assert ok(run(url, "groups", "list")).splitlines() == ["GROUP  STATE  MEMBERS  ASSIGNOR"]


def test_bad_group_inputs_exit_1_with_a_clear_message(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "2"))
    produce(url, "t", ["x"])
    fails(run(url, "consume", "missing", "--group", "g"), "TopicNotFound: ")
    fails(run(url, "consume", "t", "--group", "g", "--partition", "0"), "InvalidRequest: --group assigns")
    fails(run(url, "consume", "t", "--group", "g", "--offset", "0"), "InvalidRequest: --group assigns")
    fails(run(url, "consume", "t", "--group", "g", "--reset", "none"), "NoOffsetForPartition: group g has no")
    fails(run(url, "consume", "t", "--group", "g", "--session-timeout-ms", "10"), "InvalidRequest: session")
    fails(run(url, "groups", "describe", "nope"), "GroupNotFound: group 'nope' does not exist")
    fails(run(url, "groups", "lag", "nope"), "GroupNotFound: ")
    fails(run(url, "groups", "reset", "nope", "--to-earliest"), "GroupNotFound: ")
    fails(run(url, "groups", "reset", "g", "--topic", "t"), "InvalidRequest: give exactly one of")
    fails(
        run(url, "groups", "reset", "g", "--to-earliest", "--to-latest"), "InvalidRequest: give exactly one"
    )
    fails(
        run(url, "groups", "reset", "g", "--to-datetime", "soon", "--topic", "t"), "InvalidRequest: --to-date"
    )
    fails(
        run(url, "groups", "reset", "g", "--to-earliest", "--topic", "t:x"), "InvalidRequest: --topic 't:x'"
    )
    fails(run(url, "groups", "reset", "g", "--to-earliest", "--topic", "t:7"), "PartitionNotFound: ")
    fails(run(url, "groups", "reset", "g", "--shift-by", "1", "--topic", "t"), "InvalidRequest: cannot shift")
    fails(run(url, "groups", "describe", "g", "--members", "--state"), "InvalidRequest: give --members or")
    # nothing of that created a group or committed an offset
    assert all(g.members == 0 for g in gateway.broker.groups.list_groups())
    assert gateway.broker.groups.store.committed("g") == {}
