"""The real ``topiclake`` CLI (a subprocess) against a real gateway: topics, produce, consume, errors."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
from gateway_harness import Gateway

from topiclake.platform import partition_for_key
from topiclake.process.ports import free_port


def run(
    gateway_url: str, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m topiclake ARGS`` (the package's ``__main__``), TOPICLAKE_URL pointing at the gateway."""
    return subprocess.run(
        [sys.executable, "-m", "topiclake", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TOPICLAKE_URL": gateway_url, **(env or {})},
    )


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    return proc.stdout


def fails(proc: subprocess.CompletedProcess[str], expected: str) -> None:
    assert proc.returncode == 1, f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
    assert expected in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_topics_lifecycle(gateway: Gateway) -> None:
    url = gateway.url
    assert ok(run(url, "topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=60000"))
    assert ok(run(url, "topics", "create", "events", env={"TOPICLAKE_TOPICS_PARTITIONS": "2"}))
    assert ok(run(url, "topics", "list")).split() == ["events", "orders"]
    described = ok(run(url, "topics", "describe", "orders"))
    assert "PartitionCount: 3" in described and "retention.ms=60000" in described
    assert described.count("\tPartition: ") == 3 and "EndOffset: 0" in described
    assert "PartitionCount: 2" in ok(run(url, "topics", "describe", "events"))
    ok(
        run(
            url,
            *("topics", "alter", "orders", "--partitions", "4"),
            *("--config", "cleanup.policy=compact", "--delete-config", "retention.ms"),
        )
    )
    info = gateway.broker.describe_topic("orders")
    assert info.partitions == 4
    assert info.config.to_kafka()["cleanup.policy"] == "compact"
    assert info.config.to_kafka()["retention.ms"] == "604800000"
    assert "Deleted topic orders." in ok(run(url, "topics", "delete", "orders"))
    fails(run(url, "topics", "describe", "orders"), "TopicNotFound: ")
    ok(run(url, "topics", "delete", "orders", "--if-exists"))
    fails(run(url, "topics", "create", "events"), "TopicExists: ")
    ok(run(url, "topics", "create", "events", "--if-not-exists"))
    assert ok(run(url, "topics", "list")).split() == ["events"]


def test_produce_keyed_lines_and_consume_them_back_in_order(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "3"))
    lines = [f"key-{i % 37}\tvalue {i} ü" for i in range(1000)]
    produced = run(
        url, "produce", "t", "--key-separator", "\\t", "--header", "src=test", stdin="\n".join(lines)
    )
    ok(produced)
    assert "produced 1,000 records to t (0 failed)" in produced.stderr
    out = ok(run(url, "consume", "t", "--format", "%p\\t%o\\t%k\\t%v\\t%h\\n"))
    rows = [line.split("\t") for line in out.splitlines()]
    assert len(rows) == 1000
    assert sorted(f"{k}\t{v}" for _, _, k, v, _ in rows) == sorted(lines)
    assert all(h == "src=test" for *_, h in rows)
    by_partition: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for p, o, k, v, _ in rows:
        assert int(p) == partition_for_key(k.encode(), 3)  # Kafka's partitioner, byte for byte
        by_partition[int(p)].append((int(o), f"{k}\t{v}"))
    for p, got in by_partition.items():
        assert [o for o, _ in got] == list(range(len(got))), p  # contiguous offsets, in order
        expected = [line for line in lines if partition_for_key(line.split("\t")[0].encode(), 3) == p]
        assert [line for _, line in got] == expected  # per-partition order is the input order
    one = ok(run(url, "consume", "t", "--partition", "1", "--format", "%k\\t%v\\n"))
    assert one.splitlines() == [line for _, line in by_partition[1]]
    tail = ok(run(url, "consume", "t", "-p", "0", "--offset", "-2", "--json"))
    assert [r.split('"offset":')[1].split(",")[0] for r in tail.splitlines()] == [
        str(len(by_partition[0]) - 2),
        str(len(by_partition[0]) - 1),
    ]
    assert len(ok(run(url, "consume", "t", "--max-messages", "5")).splitlines()) == 5


def test_consume_from_a_timestamp(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "2"))
    ok(run(url, "produce", "t", stdin="old-1\nold-2\nold-3\n"))
    time.sleep(0.05)
    middle = time.time_ns() // 1_000_000
    time.sleep(0.05)
    ok(run(url, "produce", "t", stdin="new-1\nnew-2\n"))
    assert sorted(ok(run(url, "consume", "t", "--timestamp", str(middle))).split()) == ["new-1", "new-2"]
    iso = dt.datetime.fromtimestamp(middle / 1000, dt.UTC).isoformat()
    assert sorted(ok(run(url, "consume", "t", "--timestamp", iso)).split()) == ["new-1", "new-2"]
    assert len(ok(run(url, "consume", "t", "--timestamp", "0")).split()) == 5
    assert ok(run(url, "consume", "t", "--timestamp", "2100-01-01T00:00:00")) == ""
    assert len(ok(run(url, "consume", "t", "--from-beginning")).split()) == 5


def _describes(gateway: Gateway) -> float:
    """How many ``GET /v1/topics/{topic}`` the gateway has answered (its Prometheus counter)."""
    text = gateway.client.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("topiclake_http_requests_total{")
        and 'method="GET"' in line
        and 'route="/v1/topics/{topic}"' in line
    )


def test_follow_waits_for_new_records_until_interrupted(gateway: Gateway) -> None:
    url = gateway.url
    ok(run(url, "topics", "create", "t", "--partitions", "2"))
    ok(run(url, "produce", "t", stdin="before\n"))
    described = _describes(gateway)
    proc = subprocess.Popen(
        [sys.executable, "-m", "topiclake.cli", "consume", "t", "--follow", "--format", "%v\\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TOPICLAKE_URL": url},
    )
    try:
        # it starts at the end it read in its describe of t ("before" is not printed): produce after that
        deadline = time.monotonic() + 60
        while _describes(gateway) == described:
            assert proc.poll() is None and time.monotonic() < deadline, "consume --follow did not start"
            time.sleep(0.05)
        ok(run(url, "produce", "t", stdin="after-1\nafter-2\n"))
        assert proc.stdout is not None
        got = sorted([proc.stdout.readline().strip(), proc.stdout.readline().strip()])
        assert got == ["after-1", "after-2"]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "consumed 2 records from t" in err and "Traceback" not in err


def test_bad_inputs_exit_1_with_a_clear_message(strict_gateway: Gateway) -> None:
    url = strict_gateway.url
    fails(run(url, "produce", "missing", stdin="x\n"), "TopicNotFound: topic 'missing' does not exist")
    fails(run(url, "consume", "missing"), "TopicNotFound: ")
    fails(run(url, "topics", "create", "t", "--config", "retention.ms=soon"), "InvalidConfig: retention.ms")
    fails(run(url, "topics", "create", "t", "--config", "no.such.config=1"), "InvalidConfig: ")
    fails(run(url, "topics", "create", "t", "--config", "retention.ms"), "InvalidRequest: --config expects")
    assert strict_gateway.broker.list_topics() == []
    ok(run(url, "topics", "create", "t"))
    fails(run(url, "topics", "alter", "t", "--partitions", "1"), "InvalidPartitions: ")
    fails(run(url, "consume", "t", "--partition", "4"), "PartitionNotFound: ")
    bad_line = run(url, "produce", "t", "--encoding", "json", stdin='{"a": 1}\nnot json\n2\n')
    fails(bad_line, "line 2: invalid_record: value is not JSON")
    assert "produced 2 records to t (1 failed)" in bad_line.stderr
    assert strict_gateway.broker.list_offsets("t", 0, "latest") == 2
    usage = run(url, "consume", "t", "--format", "%x")
    assert usage.returncode == 2 and "unknown token %x" in usage.stderr


def test_server_down_is_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # reserved: nothing listens there
    for args in (("topics", "list"), ("consume", "t"), ("produce", "t")):
        fails(run(url, *args, stdin="x\n"), f"GatewayUnavailable: cannot reach the gateway at {url}")
    proc = run(url, "topics", "list")
    assert f"is `topiclake serve` running at {url}?" in proc.stderr


@pytest.mark.parametrize("encoding", ["string", "binary"])
def test_produce_encodings_round_trip(gateway: Gateway, encoding: str) -> None:
    import base64

    url = gateway.url
    ok(run(url, "topics", "create", "t"))
    values = ["héllo", "wörld"]
    lines = values if encoding == "string" else [base64.b64encode(v.encode()).decode() for v in values]
    ok(run(url, "produce", "t", "--encoding", encoding, stdin="\n".join(lines) + "\n"))
    assert ok(run(url, "consume", "t")).splitlines() == values
    out = ok(run(url, "consume", "t", "--json", "--encoding", "binary"))
    assert [
        base64.b64decode(line.split('"value":"')[1].split('"')[0]).decode() for line in out.splitlines()
    ] == (values)
