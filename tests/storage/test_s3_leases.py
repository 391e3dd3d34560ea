"""Log leases and writer intents (``_system/leases``) on an S3 warehouse: written, seen, released.

The Spark jobs and source take them; writing one through delta-rs's pyarrow filesystem failed on object
stores ("'Buffer' object is not an instance of 'bytes'") until Storage wrapped its output streams.
"""

from __future__ import annotations

from s3_harness import S3Warehouse

from topiclake.platform import LogLease, Storage
from topiclake.platform.storage.leases import active_leases


def test_a_lease_on_s3_is_seen_while_held_and_gone_after(s3: S3Warehouse) -> None:
    storage = Storage(s3.uri, s3.options)
    with LogLease(storage, "orders", holder="compact", kind="write"):
        leases = active_leases(storage, "orders")
        assert [(lease["holder"], lease["kind"]) for lease in leases] == [("compact", "write")]
    assert active_leases(storage, "orders") == []
