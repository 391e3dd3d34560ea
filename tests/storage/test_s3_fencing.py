"""Two brokers over one store writing one partition: each race's loser is fenced, offsets whole."""

from __future__ import annotations

import random
import threading
from collections import Counter

from _s3_checks import check_acked, check_log, table_rows
from store_harness import Warehouse

from thread_runs import in_threads
from topiclake.platform import Broker, BrokerConfig, Record, Storage


def test_two_brokers_on_one_partition_fence_and_stay_contiguous(store: Warehouse) -> None:
    acked: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    brokers = [
        Broker(Storage(store.uri, store.options), BrokerConfig(linger_ms=0, broker_id=i)) for i in range(2)
    ]
    try:
        brokers[0].create_topic("t", partitions=1)
        for b in brokers:
            b.log("t")  # both open the (empty) table before either writes

        def produce(i: int) -> None:
            broker = brokers[i % 2]
            rng = random.Random(i)
            for n in range(12):
                values = [f"b{i % 2}-t{i}-{n}-{j}" for j in range(rng.randint(1, 4))]
                results = broker.produce("t", [Record(value=v.encode()) for v in values], partition=0)
                with lock:
                    for v, res in zip(values, results, strict=True):
                        assert res.error is None, res
                        acked[v] = (res.partition, res.offset)  # type: ignore[assignment]

        errors = in_threads(4, produce)
        assert not errors, errors[0]
        fences = sum(b.log("t").fences for b in brokers)
    finally:
        for b in brokers:
            b.close()

    storage = Storage(store.uri, store.options)
    rows = table_rows(storage, "t")
    check_log(rows, 1)
    check_acked(acked, rows)
    assert len(rows) == len(acked)
    assert max(Counter(acked.values()).values()) == 1, "two acknowledged records share an offset"
    assert fences > 0, "two leaders wrote one partition and neither was fenced"
    with Broker(storage, BrokerConfig(linger_ms=0)) as fresh:  # restart from the bucket alone
        (res,) = fresh.produce("t", [Record(value=b"next")], partition=0)
        assert res.offset == len(rows)
