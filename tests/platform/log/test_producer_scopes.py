"""Per-partition producer sequences (Kafka's idempotent producers) beside HTTP's per-topic ones."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from topiclake.errors import InvalidRecord, OutOfOrderSequence
from topiclake.platform import Broker, BrokerConfig, ProducerInfo, Record, Storage


def _batch(*values: bytes) -> pa.Table:
    return pa.table({"value": pa.array(list(values), pa.binary())})


def _rows(storage: Storage, topic: str) -> int:
    return DeltaTable(storage.topic_uri(topic)).to_pyarrow_table().num_rows


def test_each_partition_numbers_its_own_sequences_and_survives_a_restart(tmp_path: Path) -> None:
    storage = Storage(str(tmp_path / "wh"))
    with Broker(storage, BrokerConfig(linger_ms=1)) as broker:
        broker.create_topic("t", partitions=2)
        pid = broker.init_producer().producer_id
        p0 = broker.produce_arrow("t", 0, _batch(b"a", b"b"), producer=ProducerInfo(pid, 0, 0, scope=0))
        p1 = broker.produce_arrow("t", 1, _batch(b"c"), producer=ProducerInfo(pid, 0, 0, scope=1))
        assert (p0, p1) == ((0, 2, 0), (1, 1, 0))
        # a retry of partition 0's batch is answered with its original offset and not written again
        retry = broker.produce_arrow("t", 0, _batch(b"a", b"b"), producer=ProducerInfo(pid, 0, 0, scope=0))
        assert retry == (0, 2, 0)
        assert broker.produce_arrow("t", 0, _batch(b"d"), producer=ProducerInfo(pid, 0, 2, scope=0))[2] == 2
        with pytest.raises(OutOfOrderSequence):  # partition 1 expects 1, whatever partition 0 did
            broker.produce_arrow("t", 1, _batch(b"gap"), producer=ProducerInfo(pid, 0, 3, scope=1))
        with pytest.raises(InvalidRecord):  # a scoped producer writes to its partition only
            broker.produce_arrow("t", 1, _batch(b"x"), producer=ProducerInfo(pid, 0, 1, scope=0))
        # HTTP's producers keep per-topic sequences (no scope) on the same topic
        other = broker.init_producer().producer_id
        http = broker.produce("t", [Record(value=b"h", partition=1)], producer=ProducerInfo(other, 0, 0))
        assert http[0].error is None and http[0].offset == 1
        assert broker.produce("t", [Record(value=b"h")], producer=ProducerInfo(other, 0, 0))[0].offset == 1
        assert _rows(storage, "t") == 5
    with Broker(storage, BrokerConfig(linger_ms=1)) as restarted:
        again = restarted.produce_arrow("t", 1, _batch(b"c"), producer=ProducerInfo(pid, 0, 0, scope=1))
        assert again == (1, 1, 0)
        nxt = restarted.produce_arrow("t", 1, _batch(b"e"), producer=ProducerInfo(pid, 0, 1, scope=1))
        assert nxt[2] == 2
        with pytest.raises(OutOfOrderSequence):
            restarted.produce_arrow("t", 0, _batch(b"late"), producer=ProducerInfo(pid, 0, 5, scope=0))
        assert _rows(storage, "t") == 6


def test_taking_over_partitions_keeps_the_state_of_the_partitions_still_led() -> None:
    """A takeover forgets (to reload from the table) only the taken partitions' producer state and the
    topic-scoped one: a partition kept has requests queued that no table snapshot knows yet. Found by
    tests/cluster/test_kafka_failover.py: librdkafka got OUT_OF_ORDER_SEQUENCE_NUMBER (fatal) from a
    broker that kept its partition while taking over a killed broker's."""
    from topiclake.platform.log.producer_state import ProducerStates

    durable: dict[tuple[int, int | None], tuple[int, int]] = {}
    states = ProducerStates(lambda pid, scope: durable.get((pid, scope)))
    for scope in (0, 1, None):
        assert states.check(ProducerInfo(7, 0, 0, scope=scope), 5) is None
        states.record(ProducerInfo(7, 0, 0, scope=scope), 5, None)
    durable.update({(7, 1): (0, 9), (7, None): (0, 9)})  # what the table says now
    states.forget({1})
    assert states.check(ProducerInfo(7, 0, 5, scope=0), 1) is None  # kept: next is 5, not reloaded
    assert states.check(ProducerInfo(7, 0, 10, scope=1), 1) is None  # reloaded: next is 10
    assert states.check(ProducerInfo(7, 0, 10, scope=None), 1) is None
