"""One broker's part in the cluster: heartbeat, watch, and — when it holds the epoch — control.

A background thread ticks every few hundred milliseconds. Each tick it heartbeats (every
``heartbeat_interval_ms``), reads the other brokers' heartbeats, and picks up a new version of the state
table. If no live broker holds the controllership it claims it (epoch + 1, fenced by the state table's
``txn``); as controller it assigns new partitions, moves a dead broker's partitions to live replicas, and
gives them back to preferred replicas that have returned. The broker learns which partitions it leads
through ``on_change``.

On object storage, where every request is billed, the store is asked once per heartbeat interval, not every
tick: one PUT (the heartbeat) and one LIST of ``_system/brokers/``. The listing tells liveness, and the
version markers in it (``_state.<version>``, written by the controller after each state commit;
``_catalog.<version>``, written by whoever changes the topic catalog) tell whether the state table or the
catalog moved: they are read only then. The node looks every tick again while something is changing: a
broker's heartbeat has gone quiet, the state disagrees with the brokers it sees alive (a death the
controller has not acted on yet), or a caller waits for a change (:meth:`ClusterNode.wait_for`). The
controller re-reads the catalog every ``_RESYNC_BEATS`` beats in case a marker was never written.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from topiclake.errors import StorageError, TopiclakeError
from topiclake.platform.catalog import TopicCatalog
from topiclake.platform.catalog.system_objects import VersionMarker, parse_marker
from topiclake.platform.cluster.assignment import TopicSpec, coordinator_for, reconcile
from topiclake.platform.cluster.membership import Membership
from topiclake.platform.cluster.metadata import BrokerEndpoint, ClusterMetadata, PartitionState
from topiclake.platform.cluster.state_table import EMPTY, ClusterState, StateTable
from topiclake.platform.config import BrokerConfig
from topiclake.platform.storage import Storage

logger = logging.getLogger(__name__)

#: Which partitions this broker leads: topic -> partition -> leader epoch.
Leadership = dict[str, dict[int, int]]

_TICK_S = 0.2
#: On object storage the controller re-reads the catalog every this many beats (a marker may be missing).
_RESYNC_BEATS = 30


@dataclass(frozen=True)
class _View:
    state: ClusterState
    live: dict[int, BrokerEndpoint]
    isolated: bool


class ClusterNode:
    """This broker's membership, its view of the cluster, and the controller role when it holds it.

    Args:
        storage: The warehouse every broker of the cluster shares.
        config: Broker settings (id, rack, heartbeat and session timeouts).
        catalog: The topic catalog (the controller assigns partitions to what it lists).
        cluster_id: Reported in metadata.
        endpoint: Returns this broker's advertised listeners (read at every heartbeat).
        on_change: Called with the partitions this broker leads whenever that changes.
        on_catalog: Called when the topic catalog moved (another broker created, grew, changed or
            deleted a topic).
    """

    def __init__(
        self,
        storage: Storage,
        config: BrokerConfig,
        catalog: TopicCatalog,
        cluster_id: str,
        endpoint: Callable[[], BrokerEndpoint],
        on_change: Callable[[Leadership], None],
        on_catalog: Callable[[], None] | None = None,
    ) -> None:
        self.broker_id = config.broker_id
        self._config = config
        self._catalog = catalog
        self._cluster_id = cluster_id
        self._endpoint = endpoint
        self._on_change = on_change
        self._on_catalog = on_catalog
        self._catalog_version = catalog.version
        self._members = Membership(
            storage, config.broker_id, config.session_timeout_ms, config.heartbeat_interval_ms
        )
        self._table = StateTable(storage)
        self._paced = not storage.is_local  # object storage: ask the store once per heartbeat interval
        self._state_marker = VersionMarker(self._members.objects, "state")
        self._resync = True  # read the state and the catalog at the next scan, markers or not
        self._beats = 0
        self._last_scan = 0.0
        self._disagree_since: float | None = None
        self._view = _View(EMPTY, {}, False)
        self._led: Leadership = {}
        self._epoch = 0  # our controller epoch while we hold it
        self._orphaned_since: float | None = None  # when we first saw no live controller
        self._next_beat = 0.0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"cluster-{self.broker_id}", daemon=True)
        self.elections = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Register (refusing a broker id held by a live broker), take a first look, start ticking."""
        wait_s = 2.5 * self._config.heartbeat_interval_ms / 1000
        self._members.register(self._endpoint(), wait_s)
        self._next_beat = time.monotonic() + self._config.heartbeat_interval_ms / 1000
        self._tick()
        self._thread.start()

    def close(self) -> None:
        """Stop ticking and leave the cluster (the controller, if it was us, is claimed by another)."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self._members.deregister()

    def poke(self) -> None:
        """Tick now (a topic was created or changed)."""
        self._wake.set()

    # ------------------------------------------------------------------ the view

    @property
    def is_controller(self) -> bool:
        view = self._view
        return view.state.controller_id == self.broker_id and self._epoch == view.state.controller_epoch

    def metadata(self) -> ClusterMetadata:
        """Live brokers (with their listeners), the controller, and every partition's state."""
        view = self._view
        listed = set(view.state.live) & set(view.live) or set(view.live)
        brokers = tuple(view.live[b] for b in sorted(listed))
        return ClusterMetadata(self._cluster_id, view.state.controller_id, brokers, view.state.partitions)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        """The state of one partition, or None if the controller has not assigned it yet."""
        states = self._view.state.partitions.get(topic, ())
        return states[partition] if 0 <= partition < len(states) else None

    def endpoint_of(self, broker_id: int) -> BrokerEndpoint | None:
        """The advertised listeners of a live broker."""
        return self._view.live.get(broker_id)

    def coordinator(self, group: str) -> int:
        """The broker coordinating a consumer group (from the controller's list of live brokers)."""
        view = self._view
        live = sorted(view.state.live) or sorted(view.live)
        return coordinator_for(group, live)

    def leadership(self) -> Leadership:
        """The partitions this broker leads, with their leader epochs."""
        return self._led

    @property
    def isolated(self) -> bool:
        """True while this broker cannot heartbeat into the warehouse: it leads nothing then."""
        return self._view.isolated

    def wait_for(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        """Block until ``predicate()`` holds after a view change, or the timeout passes."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._wake.set()
                self._changed.wait(min(remaining, _TICK_S))
        return True

    # ------------------------------------------------------------------ the loop

    def _run(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(_TICK_S)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._tick(woken)
            except Exception:  # keep ticking: the next tick may reach the warehouse again
                logger.exception("broker %d: cluster tick failed", self.broker_id)

    def _tick(self, woken: bool = True) -> None:
        now = time.monotonic()
        beat = now >= self._next_beat
        if beat:
            self._next_beat = now + self._config.heartbeat_interval_ms / 1000
            self._beats += 1
            if self._paced and self._beats % _RESYNC_BEATS == 0 and self.is_controller:
                self._resync = True
            try:
                self._members.beat(self._endpoint())
                if not self._paced:
                    self._watch_catalog()
            except StorageError as exc:
                logger.warning("broker %d: %s", self.broker_id, exc.message)
        isolated = time.monotonic() - self._members.last_beat > self._members.session_timeout_s
        live, state = self._view.live, self._view.state
        if self._must_look(now, beat, woken):
            self._last_scan = now
            try:
                live = self._members.scan()
                state = self._follow() if self._paced else self._read_state()
            except StorageError as exc:
                logger.warning("broker %d: cannot read the cluster state: %s", self.broker_id, exc.message)
                live, state = self._view.live, self._view.state
        if isolated and not self._view.isolated:
            logger.error(
                "broker %d: no heartbeat reached the warehouse for %.1f s: giving up leadership of every "
                "partition until it does",
                self.broker_id,
                self._members.session_timeout_s,
            )
        if not isolated:
            state = self._control(state, live)
            if self._paced and self.is_controller:
                self._mark(state)
        self._publish(_View(state, live, isolated))

    def _must_look(self, now: float, beat: bool, woken: bool) -> bool:
        """Whether this tick asks the store: always on a local disk; on object storage at each beat, and
        every tick while a caller waits or the cluster is changing."""
        if not self._paced or beat:
            return True
        if now - self._last_scan < _TICK_S * 0.9:
            return False
        return woken or self._changing(now)

    def _changing(self, now: float) -> bool:
        """A broker's heartbeat has gone quiet, or the state disagrees with the brokers seen alive (for
        at most two session timeouts: a view that never agrees must not keep the node polling)."""
        view = self._view
        interval = self._config.heartbeat_interval_ms / 1000
        quiet = max(1.5 * interval, interval + 1.1)  # object stores keep whole seconds of LastModified
        if any(self._members.quiet_for(b) > quiet for b in view.live):
            return True
        state, alive = view.state, set(view.live)
        leaders = {s.leader for states in state.partitions.values() for s in states if s.leader >= 0}
        if set(state.live) == alive and state.controller_id in alive and leaders <= alive:
            self._disagree_since = None
            return False
        if self._disagree_since is None:
            self._disagree_since = now
        return now - self._disagree_since < 2 * self._members.session_timeout_s

    def _follow(self) -> ClusterState:
        """Object storage: read the state table and the catalog only when their markers moved."""
        markers = self._members.markers
        resync, self._resync = self._resync, False
        if resync or markers.get("catalog", -1) > self._catalog.version:
            self._watch_catalog()
        current = self._view.state
        if resync or markers.get("state", -1) > current.version:
            return self._read_state()
        return current

    def _mark(self, state: ClusterState) -> None:
        """As controller on object storage: the marker of the state's version (again, if writing it
        failed before), and the markers of either kind that newer ones made stale tidied away."""
        if state.version > self._state_marker.published:
            self._state_marker.publish(state.version)
        listing = self._members.listing
        kinds = [m[0] for m in (parse_marker(i.name) for i in listing) if m is not None]
        stale = {k for k in kinds if kinds.count(k) > 1}
        for kind in stale:
            VersionMarker(self._members.objects, kind).forget_below(listing, self._members.markers[kind])
        if stale:
            self._members.listing = [i for i in listing if parse_marker(i.name) is None]

    def _watch_catalog(self) -> None:
        self._catalog.refresh()
        version = self._catalog.version
        if version != self._catalog_version:
            self._catalog_version = version
            if self._on_catalog is not None:
                self._on_catalog()

    def _read_state(self) -> ClusterState:
        current = self._view.state
        if self._table.version() == current.version and current.version >= 0:
            return current
        return self._table.read()

    def _control(self, state: ClusterState, live: dict[int, BrokerEndpoint]) -> ClusterState:
        me = self.broker_id
        if self._epoch > 0 and state.controller_id == me and state.controller_epoch == self._epoch:
            return self._reconcile(state, live)
        self._epoch = 0
        if state.controller_id in live and state.controller_id != me:
            self._orphaned_since = None
            return state  # a live controller: follow it
        now = time.monotonic()
        if self._orphaned_since is None:
            self._orphaned_since = now
        # the lowest live id claims at once; the others give it a moment before they try too
        if live and min(live) != me and now - self._orphaned_since < 1.5:
            return state
        return self._claim(state, live)

    def _claim(self, state: ClusterState, live: dict[int, BrokerEndpoint]) -> ClusterState:
        epoch = state.controller_epoch + 1
        partitions = self._decide(state, live, refresh=True)
        try:
            version = self._table.write(self.broker_id, epoch, tuple(sorted(live)), partitions, state.version)
        except StorageError as exc:
            logger.info(
                "broker %d: controller claim for epoch %d lost: %s", self.broker_id, epoch, exc.message
            )
            return self._table.read()
        self._epoch = epoch
        self.elections += 1
        logger.warning(
            "broker %d: became controller with epoch %d (was broker %d); live brokers %s",
            self.broker_id,
            epoch,
            state.controller_id,
            sorted(live),
        )
        return ClusterState(version, self.broker_id, epoch, tuple(sorted(live)), partitions)

    def _decide(
        self, state: ClusterState, live: dict[int, BrokerEndpoint], refresh: bool = False
    ) -> dict[str, tuple[PartitionState, ...]]:
        if refresh or not self._paced:  # on object storage the catalog's marker says when it moved
            self._catalog.refresh()
        topics = {t.name: TopicSpec(t.partitions, t.config.replication_factor) for t in self._catalog.list()}
        delay_s = self._config.leader_rebalance_delay_ms / 1000
        settled = [b for b in live if self._members.alive_for(b) >= delay_s]
        racks = {b: e.rack for b, e in live.items()}
        return reconcile(state.partitions, topics, live, settled, racks)

    def _reconcile(self, state: ClusterState, live: dict[int, BrokerEndpoint]) -> ClusterState:
        partitions = self._decide(state, live)
        alive = tuple(sorted(live))
        if partitions == state.partitions and alive == state.live:
            return state
        for name, states in partitions.items():
            before = state.partitions.get(name, ())
            for s in states:
                old = before[s.partition] if s.partition < len(before) else None
                if old is not None and old.leader != s.leader:
                    logger.warning(
                        "controller %d: %s-%d leader %d -> %d (epoch %d), isr %s",
                        self.broker_id,
                        name,
                        s.partition,
                        old.leader,
                        s.leader,
                        s.leader_epoch,
                        list(s.isr),
                    )
        try:
            version = self._table.write(self.broker_id, self._epoch, alive, partitions, state.version)
        except StorageError as exc:
            logger.warning("controller %d: state write failed, re-reading: %s", self.broker_id, exc.message)
            self._epoch = 0
            return self._table.read()
        return ClusterState(version, self.broker_id, self._epoch, alive, partitions)

    def _publish(self, view: _View) -> None:
        led: Leadership = {}
        if not view.isolated:
            for name, states in view.state.partitions.items():
                mine = {s.partition: s.leader_epoch for s in states if s.leader == self.broker_id}
                if mine:
                    led[name] = mine
        changed = led != self._led
        self._view = view
        if changed:
            self._led = led
            try:
                self._on_change(led)
            except TopiclakeError as exc:
                logger.error("broker %d: cannot apply leadership: %s", self.broker_id, exc.message)
        with self._changed:
            self._changed.notify_all()
