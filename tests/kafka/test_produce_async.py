"""The Produce hot path (kafka/handlers/produce_async.py): batches of several connections' pipelined
requests, each over several partitions, are queued on the event loop and share Delta commits, keep each
producer's order per partition and are answered with the offsets they got."""

from __future__ import annotations

from gateway_harness import table_rows
from kafka_harness import KafkaGateway, connect, frame, read_frame, response

CONNECTIONS, REQUESTS, PARTITIONS, RECORDS = 3, 10, 3, 10


def test_pipelined_requests_of_several_connections_share_commits_in_order(kafka: KafkaGateway) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    broker = kafka.gw.broker
    broker.create_topic("fast", partitions=PARTITIONS)
    pids = [broker.init_producer().producer_id for _ in range(CONNECTIONS)]
    socks = [connect(kafka) for _ in range(CONNECTIONS)]
    try:
        for c, s in enumerate(socks):
            frames = []
            for k in range(REQUESTS):
                parts = []
                for p in range(PARTITIONS):
                    b = DefaultRecordBatchBuilder(2, 0, 0, pids[c], 0, RECORDS * k, 1 << 20)
                    for i in range(RECORDS):
                        b.append(i, 1_700_000_000_000 + i, b"k", b"%d-%d-%d" % (c, p, RECORDS * k + i), [])
                    parts.append({"index": p, "records": bytes(b.build())})
                data = [{"name": "fast", "partition_data": parts}]
                body = {"acks": -1, "timeout": 30000, "topic_data": data}
                frames.append(frame(0, 9, body, correlation_id=k))
            s.sendall(b"".join(frames))  # all pipelined at once, on every connection
        answers = {
            c: [response(0, 9, read_frame(s)).responses[0].partition_responses for _ in range(REQUESTS)]
            for c, s in enumerate(socks)
        }
    finally:
        for s in socks:
            s.close()
    rows = table_rows(kafka.gw, "fast")
    assert rows.num_rows == CONNECTIONS * REQUESTS * PARTITIONS * RECORDS
    at = {
        (p, o): v
        for p, o, v in zip(
            rows["partition"].to_pylist(), rows["offset"].to_pylist(), rows["value"].to_pylist(), strict=True
        )
    }
    for c, requests in answers.items():
        last = {p: -1 for p in range(PARTITIONS)}
        for k, parts in enumerate(requests):
            for p, answer in enumerate(parts):
                assert (answer.index, answer.error_code) == (p, 0)
                base = int(answer.base_offset)
                assert base > last[p]  # a producer's batches of a partition keep their order
                last[p] = base
                got = [at[(p, base + i)] for i in range(RECORDS)]  # the answered offsets hold the batch
                assert got == [b"%d-%d-%d" % (c, p, RECORDS * k + i) for i in range(RECORDS)]
    # 30 requests of 3 partitions: queued without a thread each, many share one Delta commit
    assert broker.log("fast").commits < CONNECTIONS * REQUESTS


def test_a_batch_bigger_than_the_loop_limit_takes_the_thread_path_with_the_same_answer(
    kafka: KafkaGateway,
) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from topiclake.kafka.handlers.produce_async import LOOP_MAX_BYTES

    kafka.gw.broker.create_topic("big")
    value = b"v" * 1000
    frames = []
    for k, count in enumerate((3, LOOP_MAX_BYTES // 1000 + 50, 3)):  # small, big (thread path), small
        b = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
        for i in range(count):
            b.append(i, 1_700_000_000_000, None, value, [])
        data = [{"name": "big", "partition_data": [{"index": 0, "records": bytes(b.build())}]}]
        frames.append(frame(0, 9, {"acks": -1, "timeout": 30000, "topic_data": data}, correlation_id=k))
    with connect(kafka) as s:
        s.sendall(b"".join(frames))
        answers = [response(0, 9, read_frame(s)).responses[0].partition_responses[0] for _ in frames]
    big = LOOP_MAX_BYTES // 1000 + 50
    assert [(a.error_code, a.base_offset) for a in answers] == [(0, 0), (0, 3), (0, 3 + big)]
    assert table_rows(kafka.gw, "big").num_rows == 3 + big + 3
