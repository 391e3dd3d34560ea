"""A topic log's flusher: the group commit of everything queued, fencing, rebase and retries.

Split from :mod:`.topic_log` (its module docstring tells the protocol).
"""

from __future__ import annotations

import logging
import time
import uuid

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from topiclake.errors import CommitConflict, RequestTimedOut, StorageError, TopiclakeError
from topiclake.platform.log._base import (
    FOREIGN_ERRORS,
    commit_landed,
    epoch_app_id,
    partition_app_id,
)
from topiclake.platform.log._fencing import LogFencing
from topiclake.platform.log._local import commit_table, partition_of
from topiclake.platform.log.append_handle import PendingBatch, settle_all, whole_table
from topiclake.platform.log.fast_append import LostRace
from topiclake.platform.log.object_append import ahead
from topiclake.platform.records import now_ms
from topiclake.platform.storage.leases import WRITE_INTENT_MAX_S, active_leases

logger = logging.getLogger("topiclake.platform.log.topic_log")  # one logger for all parts of the log


def _runs_of(take: list[PendingBatch]) -> list[tuple[int, int, int]] | None:
    """(partition, first row, rows) of each partition's batches in ``take``, when each partition's are
    one contiguous run of it (a commit built partition by partition); else None."""
    runs: list[tuple[int, int, int]] = []
    seen: set[int] = set()
    row = 0
    for pend in take:
        if runs and runs[-1][0] == pend.partition:
            p, start, count = runs[-1]
            runs[-1] = (p, start, count + pend.count)
        elif pend.partition in seen:
            return None
        else:
            seen.add(pend.partition)
            runs.append((pend.partition, row, pend.count))
        row += pend.count
    return runs


class LogCommits(LogFencing):
    """The flusher thread's work: one Delta commit per round."""

    # ------------------------------------------------------------------ flush

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                linger = self._linger_s()
                started = time.monotonic()
                deadline, cap = started + linger, started + self._linger_cap_s(linger)
                seen, self._lingered_on = self._queued_requests, False
                # Adaptive linger: once as many requests wait as the last commit carried, the producers
                # that were waiting for it are all back; lingering longer only adds latency. On object
                # storage, while requests keep arriving, it lingers on (up to the cap): fewer PUTs per MB.
                while (
                    not self._closing
                    and self._queued_records < self._config.batch_max_records
                    and self._queued_bytes < self._config.batch_max_bytes
                    and self._queued_requests < self._last_requests
                ):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        if self._queued_requests == seen or deadline >= cap:
                            break
                        seen, deadline = self._queued_requests, min(cap, deadline + linger)
                        self._lingered_on = True
                        continue
                    self._cond.wait(remaining)
                self._last_requests = max(1, self._queued_requests)
                self._queued_requests = 0
                self._inflight = self._queue
                self._queue = []
                self._queued_records = 0
                self._queued_bytes = 0
                self._split_for_pipeline()  # object storage: two commits whose round trips overlap
            self._flush()
            while self._take_prefetched():  # S3: the next batch's files are stored already
                self._flush()

    def _flush(self) -> None:
        take = self._inflight
        started = time.perf_counter()
        try:
            self._commit()
        except Exception as exc:
            error = exc if isinstance(exc, TopiclakeError) else StorageError(f"commit failed: {exc}")
            self._fail_all(error)
            return
        finally:
            self._budget.release(sum(p.nbytes for p in take))
        elapsed_ms = (time.perf_counter() - started) * 1000
        if self._fast is None:  # delta-rs refreshed our snapshot: it is now at least as new
            self._takeover_reader = None
        self._count_commit(elapsed_ms, sum(p.count for p in take))
        self._last_commit_s = elapsed_ms / 1000
        with self._lock:
            take = self._inflight
            self._inflight = []
            # The next linger waits for the producers of this commit as well as those queued behind it:
            # acknowledged now, a closed-loop producer's next request is a round trip away. One commit
            # of both groups costs about what one of either costs when the commit's price is per
            # partition (a file each), not per record: many partitions' topics commit twice the records
            # per commit instead of two half-full commits alternating (bounded by the linger's deadline).
            self._last_requests = max(1, len({id(p.handle) for p in take}) + self._queued_requests)
        ends: dict[int, int] = {}
        for pend in take:
            ends[pend.partition] = pend.base_offset + pend.count
        whole = whole_table(take)
        groups, self._tail_groups = self._tail_groups, None
        if whole is not None and len(ends) == 1:  # the common case: the commit's table is the tail's
            size = whole.get_total_buffer_size()  # not sliced: its buffers are its bytes
            self._parts[take[0].partition].tail.add(take[0].base_offset, whole, size)
        elif groups is not None:  # a local commit of many partitions: its files' rows, already split
            self._add_groups_to_tails(*groups)
        elif whole is not None and (runs := _runs_of(take)) is not None:
            # an object-store commit of many partitions, built partition by partition: slices of its
            # table, nothing joined or copied before the answers (~1 ms a commit of 8,000 records)
            slices = [((p, 0), whole.slice(start, count)) for p, start, count in runs]
            self._add_groups_to_tails(slices, whole.get_total_buffer_size())
        else:
            self._add_to_tails(take)
        for p, end in ends.items():
            self._parts[p].advance(end)
        settle_all(pend.handle for pend in take)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "topic %s: committed version %d with %d records in %.1f ms, ends %s",
                self.topic,
                self.known_version(),
                sum(p.count for p in take),
                elapsed_ms,
                ends,
            )

    def _add_groups_to_tails(self, groups: list[tuple[tuple[int, int], pa.Table]], nbytes: int) -> None:
        """The rows of a commit's files, by (partition, segment) in offset order, to the partitions' tails:
        slices of one table, so nothing is joined or copied (joining each partition's request batches
        was a quarter of the flusher's time on 12 partitions). Each is charged its share of the bytes."""
        rows = sum(t.num_rows for _, t in groups) or 1
        for (partition, _segment), table in groups:
            base = table.column("offset")[0].as_py()
            self._parts[partition].tail.add(base, table, nbytes * table.num_rows // rows)

    def _add_to_tails(self, take: list[PendingBatch]) -> None:
        runs: dict[int, tuple[int, list[pa.Table]]] = {}
        for pend in take:  # one table per partition per commit for the tail (offsets are contiguous)
            base, tables = runs.setdefault(pend.partition, (pend.base_offset, []))
            assert pend.table is not None  # built by _commit
            tables.append(pend.table)
        for p, (base, tables) in runs.items():
            joined = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
            self._parts[p].tail.add(base, joined)

    def _commit(self) -> None:
        self._tail_groups = None
        commit_id = uuid.uuid4().hex
        attempt = 0
        races = 0  # versions lost to other writers on the local append path
        known = True  # whether every earlier attempt is known not to have landed
        while True:
            with self._lock:
                if self._fast is not None:
                    # the commit's table built partition by partition (a stable sort: each partition's
                    # batches keep their offset order), so its files are runs of it, split without a
                    # take, and the tails take slices of it (_flush); in place: _flush reads the order
                    self._inflight.sort(key=partition_of)
                take = list(self._inflight)
            # in-flight batches change only on this thread (commit, rebase), so no lock while building
            self._materialize(take)
            lost = {pend.partition for pend in take if not self.leads(pend.partition)}
            if lost and (attempt > 0 or races > 0):
                # leadership went while we retried, or after a version was lost to another writer (the
                # new leader's commit, maybe): stop writing those partitions (_after_lost_race)
                unknown = None
                if not known:
                    unknown = RequestTimedOut(
                        f"{self.topic}: lost leadership while a commit failed; its outcome is unknown: retry "
                        "(with an idempotent producer to be safe)",
                        topic=self.topic,
                    )
                self._fail_partitions(lost, unknown)
                continue
            if not take:
                return
            ends: dict[int, int] = {}
            producers: dict[str, int] = {}
            for pend in take:
                ends[pend.partition] = pend.base_offset + pend.count
                if pend.producer_txn is not None:
                    producers[pend.producer_txn[0]] = pend.producer_txn[1]
            now = now_ms()
            txn_ids = [(partition_app_id(self.topic, p), end) for p, end in sorted(ends.items())]
            txn_ids += list(producers.items())
            led = self._led
            if led is not None:  # the leader epoch travels with every commit of a cluster's leader
                txn_ids += [(epoch_app_id(self.topic, p), led[p]) for p in sorted(ends) if p in led]
            data = commit_table(take)
            self._yield_to_writers()
            custom = {"topiclake.commit": commit_id, "topiclake.broker": str(self._config.broker_id)}
            if self._fast is not None:
                try:
                    self._commit_fast(self._fast, data, txn_ids, now, custom, take)
                    return
                except LostRace as race:
                    races += 1
                    if races > 1000:  # other writers took a thousand versions in a row: give up
                        raise CommitConflict(
                            f"commit to topic {self.topic} lost {races} races to other writers",
                            topic=self.topic,
                        ) from race
                    if self._after_lost_race(race.winners):
                        attempt = 0  # another writer of our partitions moved on: new offsets
                    continue
            base_version = self._dt.version()
            try:
                with self._commit_lock:
                    write_deltalake(
                        self._dt,
                        data,
                        mode="append",
                        commit_properties=CommitProperties(
                            app_transactions=[Transaction(app, v, now) for app, v in txn_ids],
                            custom_metadata=custom,
                        ),
                        post_commithook_properties=self._hooks,
                    )
                self._storage.sync_commit(self.uri, self._dt.version())
                if self._dt.version() != base_version + 1:
                    # delta-rs committed on top of others' commits, now in our snapshot: if one of them
                    # was another writer's, queued records must move behind it before the next commit
                    self._rebase_if_fenced(committed=ends)
                if self._fast is not None:
                    self._fast.version = max(self._fast.version, self._dt.version())
                return
            except FOREIGN_ERRORS as exc:
                attempt += 1
                reason = str(exc).splitlines()[0]
                known = self._refresh_after_failure()
                if known and commit_landed(self._dt, commit_id, base_version):
                    logger.warning(
                        "topic %s: commit %s landed despite error (%s)", self.topic, commit_id, reason
                    )
                    return
                if self._rebase_if_fenced():
                    attempt = 0  # another writer moved on: a fresh try with new offsets
                    continue
                if attempt >= self._config.commit_attempts:
                    raise CommitConflict(
                        f"commit to topic {self.topic} failed {attempt} times: {reason}", topic=self.topic
                    ) from exc
                if "concurrent transaction" in reason and attempt <= 3:
                    # lost to a compaction or retention commit, now in our refreshed snapshot: try again now
                    logger.info(
                        "topic %s: commit retried after a concurrent rewrite (%s)", self.topic, reason
                    )
                    continue
                backoff = min(0.005 * 2**attempt, 1.0)
                logger.warning(
                    "topic %s: commit attempt %d failed (%s); retrying in %.0f ms",
                    self.topic,
                    attempt,
                    reason,
                    backoff * 1000,
                )
                time.sleep(backoff)

    def _yield_to_writers(self) -> None:
        """Hold this commit while another writer of the topic has announced its intent (see leases.py).

        The lease directory is looked at once every 100 ms at most, so an idle check costs nothing. On
        object storage every 2 s (a maintenance round's listing stands for it when newer), and that idle
        look (a LIST, a round trip to the store: on one commit a second it was a +20 ms step in
        single-record latency) runs on a pool thread: a writer's intent then holds the commit after the
        one that saw it. While an intent is seen, the looks are the flusher's own, every 20 ms.
        """
        deadline = time.monotonic() + WRITE_INTENT_MAX_S
        while self._holds and time.monotonic() < deadline and not self._closing:  # this process's own
            time.sleep(0.002)
        while True:
            now = time.monotonic()
            # on object storage each look is a billed LIST: every 2 s, or the maintenance round's listing
            # (_intents_seen) when it is newer (a writer that announced its intent retries until the
            # brokers hold; the intent only buys it a turn sooner)
            idle_s = 0.1 if self._storage.is_local else 2.0
            if now - self._intents_checked >= (0.02 if self._intents else idle_s):
                self._intents_checked = now
                if self._storage.is_local or self._intents:
                    self._check_intents()
                else:  # the idle look, a LIST round trip, off the commit path: its answer holds the next
                    ahead().submit(self._check_intents)
            if not self._intents or now >= deadline or self._closing:
                return
            time.sleep(0.01)

    def _intents_seen(self, leases: list[dict[str, object]]) -> None:
        """Another listing of the topic's leases (the maintenance round's) stands for the flusher's idle
        look: on object storage each look is a LIST, billed as a PUT."""
        self._intents = any(lease.get("kind", "log") == "write" for lease in leases)
        self._intents_checked = time.monotonic()

    def _check_intents(self) -> None:
        try:
            self._intents = bool(active_leases(self._storage, self.topic, kind="write"))
        except OSError:
            self._intents = False
        if self._intents:
            logger.info("topic %s: holding commits for another writer's intent", self.topic)
