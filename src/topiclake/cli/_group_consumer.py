"""``topiclake consume --group``: a member of a consumer group over the native ``/v1`` groups API.

One thread, one loop, in Kafka's order: heartbeat (when due, or at once while a rebalance is going on)
and adopt the assignment it answers; fetch every assigned partition from its position; print; commit the
new positions (at-least-once). With ``commit_before`` the positions are committed before the records are
printed, and records whose commit was refused are not printed (at-most-once). A partition newly assigned
starts at the group's committed offset, else per ``auto.offset.reset``.

Because the loop commits before its next heartbeat, a member hands a partition over (cooperative-sticky:
it keeps the partition until it heartbeats) with everything it printed committed, so the next owner
starts right after it. With the eager assignors a partition moves at once: the old owner's commit is
refused, and what it printed since its last commit is printed again by the new owner (at-least-once).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from topiclake.errors import (
    GroupNotFound,
    IllegalGeneration,
    NoOffsetForPartition,
    OffsetOutOfRange,
    RebalanceInProgress,
    UnknownMemberId,
)

if TYPE_CHECKING:
    from topiclake.client import Assignor, FetchedRecord, TopiclakeClient, TopicPartition

TP = tuple[str, int]
#: Prints one batch of records of one partition.
Emit = Callable[[str, int, list["FetchedRecord"]], None]


@dataclass(frozen=True)
class GroupOptions:
    """How ``consume --group`` joins, starts, commits and stops."""

    group: str
    topic: str
    assignor: Assignor
    session_timeout_ms: int
    heartbeat_interval_ms: int
    max_poll_interval_ms: int
    client_id: str
    reset: str  # earliest | latest | none
    commit_before: bool
    follow: bool
    max_messages: int | None
    max_records: int


def _tps(assignment: list[TopicPartition]) -> list[TP]:
    return sorted((a["topic"], a["partition"]) for a in assignment)


class GroupConsumer:
    """A member of one group, subscribed to one topic, printing what it consumes through ``emit``."""

    def __init__(self, tl: TopiclakeClient, options: GroupOptions, emit: Emit) -> None:
        self.tl = tl
        self.o = options
        self.emit = emit
        self.member_id: str | None = None
        self.generation = -1
        self.assignment: list[TP] = []
        self.positions: dict[TP, int] = {}
        self.committed: dict[TP, int | None] = {}
        self.ends: dict[TP, int] = {}
        self.rebalancing = False
        self.count = 0
        self._last_heartbeat = 0.0
        self._interval_s = min(options.heartbeat_interval_ms, options.session_timeout_ms // 3) / 1000

    # ------------------------------------------------------------------ membership

    def join(self, member_id: str | None = None) -> None:
        """Join (or rejoin with ``member_id``) and start every assigned partition afresh."""
        try:
            r = self.tl.join_group(
                self.o.group,
                [self.o.topic],
                member_id=member_id,
                client_id=self.o.client_id,
                session_timeout_ms=self.o.session_timeout_ms,
                max_poll_interval_ms=self.o.max_poll_interval_ms,
                assignor=self.o.assignor,
            )
        except UnknownMemberId:
            if member_id is None:
                raise
            self.join(None)
            return
        self.member_id, self.generation = r["member_id"], r["generation_id"]
        self.rebalancing = r["rebalance_in_progress"]
        self._last_heartbeat = time.monotonic()
        self._adopt(_tps(r["assignment"]), fresh=True)

    def heartbeat(self) -> None:
        """Heartbeat (as a poll) and adopt the answer; rejoin when the member is stale or gone."""
        assert self.member_id is not None
        try:
            r = self.tl.heartbeat(self.o.group, self.member_id, self.generation, poll=True)
        except IllegalGeneration:
            self.join(self.member_id)
            return
        except (UnknownMemberId, GroupNotFound):
            self.join(None)
            return
        self._last_heartbeat = time.monotonic()
        self.rebalancing = r["rebalance_in_progress"]
        self.generation = r["generation_id"]
        self._adopt(_tps(r["assignment"]), fresh=False)

    def leave(self) -> None:
        """Leave the group, so that the others rebalance at once rather than after the session timeout."""
        if self.member_id is not None:
            self.tl.leave_group(self.o.group, self.member_id)
            self.member_id = None

    def _adopt(self, assignment: list[TP], *, fresh: bool) -> None:
        if assignment == self.assignment and not fresh:
            return
        keep = set() if fresh else set(assignment) & set(self.assignment)
        for state in (self.positions, self.committed, self.ends):
            for tp in list(state):
                if tp not in keep:
                    del state[tp]
        self.assignment = assignment
        self._start([tp for tp in assignment if tp not in keep])
        shown = ",".join(f"{t}-{p}" for t, p in assignment) or "none"
        typer.echo(f"group {self.o.group}: generation {self.generation}, partitions {shown}", err=True)

    def _start(self, tps: list[TP]) -> None:
        """Positions of newly assigned partitions: the committed offset if within the log, else the reset."""
        if not tps:
            return
        committed = {
            (c["topic"], c["partition"]): c["offset"] for c in self.tl.committed_offsets(self.o.group)
        }
        for tp in tps:
            ends = self.tl.offsets(*tp)
            start, end = ends["beginning_offset"], ends["end_offset"]
            c = committed.get(tp)
            self.committed[tp] = c
            self.ends[tp] = end
            if c is not None and start <= c <= end:
                self.positions[tp] = c
            else:
                self.positions[tp] = self._reset(tp, c, start, end)

    def _reset(self, tp: TP, offset: int | None, start: int, end: int) -> int:
        if self.o.reset == "earliest":
            return start
        if self.o.reset == "latest":
            return end
        if offset is None:
            raise NoOffsetForPartition(
                f"group {self.o.group} has no committed offset for {tp[0]}-{tp[1]} and --reset is none",
                group=self.o.group,
                topic=tp[0],
                partition=tp[1],
            )
        raise OffsetOutOfRange(
            f"offset {offset} of group {self.o.group} is out of range [{start}, {end}] for {tp[0]}-{tp[1]} "
            "and --reset is none",
            topic=tp[0],
            partition=tp[1],
            offset=offset,
        )

    # ------------------------------------------------------------------ commits

    def commit(self, tps: list[TP] | None = None) -> set[TP]:
        """Commit the positions of ``tps`` (default: every assigned partition) that moved; return those
        committed. A refused commit syncs the membership and retries the partitions still assigned."""
        for attempt in range(2):
            todo = {
                tp: self.positions[tp]
                for tp in (tps if tps is not None else self.assignment)
                if tp in self.positions and self.positions[tp] != self.committed.get(tp)
            }
            if not todo or self.member_id is None:
                return set()
            try:
                self.tl.commit_offsets(
                    self.o.group, todo, member_id=self.member_id, generation_id=self.generation
                )
            except RebalanceInProgress:
                if attempt:
                    return set()
                self.heartbeat()
                continue
            except (IllegalGeneration, UnknownMemberId, GroupNotFound):
                if attempt:
                    return set()
                self.join(self.member_id)  # positions restart from the committed offsets: redelivery
                return set()
            self.committed.update(todo)
            return set(todo)
        return set()

    # ------------------------------------------------------------------ the loop

    def _fetch_round(self, wait_ms: int) -> list[tuple[TP, list[FetchedRecord], int]]:
        batches = []
        for tp in list(self.assignment):
            pos = self.positions.get(tp)
            if pos is None or (not self.o.follow and pos >= self.ends.get(tp, pos + 1)):
                continue
            try:
                b = self.tl.fetch(tp[0], tp[1], pos, max_records=self.o.max_records, wait_ms=wait_ms)
            except OffsetOutOfRange as exc:
                start = int(exc.details.get("log_start_offset", 0))
                end = int(exc.details.get("high_watermark", start))
                self.positions[tp] = self._reset(tp, pos, start, end)
                typer.echo(
                    f"{tp[0]}-{tp[1]}: offset {pos} is out of range, reset to {self.positions[tp]}", err=True
                )
                continue
            self.ends[tp] = b["high_watermark"]
            if b["records"]:
                batches.append((tp, b["records"], b["next_offset"]))
            else:
                self.positions[tp] = max(pos, b["next_offset"])
        return batches

    def _limit(
        self, batches: list[tuple[TP, list[FetchedRecord], int]]
    ) -> list[tuple[TP, list[FetchedRecord], int]]:
        """The batches cut to what --max-messages still allows (the next offset after the last kept)."""
        if self.o.max_messages is None:
            return batches
        left = self.o.max_messages - self.count
        out = []
        for tp, records, nxt in batches:
            if left <= 0:
                break
            if len(records) > left:
                records = records[:left]
                nxt = records[-1]["offset"] + 1
            left -= len(records)
            out.append((tp, records, nxt))
        return out

    def _print(self, tp: TP, records: list[FetchedRecord]) -> None:
        self.count += len(records)  # before: once emit's flush shows them to a reader, they are counted
        self.emit(tp[0], tp[1], records)

    def _done(self) -> bool:
        if self.o.max_messages is not None and self.count >= self.o.max_messages:
            return True
        if self.o.follow or self.rebalancing:
            return False
        return all(self.positions.get(tp, 0) >= self.ends.get(tp, 0) for tp in self.assignment)

    def run(self) -> int:
        """Consume until the end (of every assigned partition, without ``follow``), ``max_messages`` or
        Ctrl-C; commit what was printed and leave the group. Returns the number of records printed."""
        try:
            self.join()
            idle = False
            while True:
                if self.rebalancing or time.monotonic() - self._last_heartbeat >= self._interval_s:
                    self.heartbeat()
                if not self.assignment:
                    if not self.o.follow and not self.rebalancing:
                        break
                    time.sleep(min(self._interval_s, 0.1 if self.rebalancing else 0.5))
                    continue
                wait_ms = 0
                if idle and self.o.follow:
                    wait_ms = max(20, min(1000, int(self._interval_s * 1000) // (2 * len(self.assignment))))
                batches = self._fetch_round(wait_ms)
                idle = not batches
                batches = self._limit(batches)
                if self.o.commit_before:
                    before = dict(self.positions)
                    for tp, _, nxt in batches:
                        self.positions[tp] = nxt
                    ok = self.commit([tp for tp, _, _ in batches])
                    for tp, records, _ in batches:
                        if tp in ok:
                            self._print(tp, records)
                        elif tp in self.positions and tp in before:
                            self.positions[tp] = before[tp]  # not ours to print: another member reads it
                    self.commit()  # the starting positions of partitions that had nothing to read
                else:
                    for tp, records, nxt in batches:
                        if tp in self.positions:
                            self._print(tp, records)
                            self.positions[tp] = nxt
                    self.commit()
                if self._done():
                    self.heartbeat()  # one more: a rebalance may have given this member more to read
                    if self._done():
                        break
        finally:
            self._close()
        return self.count

    def _close(self) -> None:
        from topiclake.errors import TopiclakeError

        try:
            if not self.o.commit_before:
                self.commit()
            self.leave()
        except (TopiclakeError, KeyboardInterrupt) as exc:
            typer.echo(f"group {self.o.group}: could not commit and leave cleanly: {exc}", err=True)
