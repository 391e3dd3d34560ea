"""By hand (not a test): Spark's own Delta reader and the compaction job over s3a:// on the local S3 server.

The S3A jars (hadoop-aws and the AWS SDK v2 modules it needs, ~12 MB) come from the jar cache that
`make install` fills (`python -m topiclake.sparkenv.jars resolve`); an optional directory argument adds
more jars. tests/spark/test_s3a_delta.py and tests/spark/test_jobs_concurrency.py cover this on every run.

    .venv/bin/python infra/s3a_check.py

Prints one line ``RESULT {...}`` with the timings and checks.
"""

import glob
import json
import sys
import time

from topiclake.jobs.session import get_spark, spark_conf
from topiclake.objectstore import LocalS3Server
from topiclake.platform import Broker, BrokerConfig, Record, Storage

t_all = time.perf_counter()
srv = LocalS3Server().start()
srv.create_bucket("lake")
o = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": "us-east-1",
    "AWS_ENDPOINT_URL": srv.endpoint,
    "AWS_ALLOW_HTTP": "true",
}
out = {}
try:
    with Broker(Storage("s3://lake/wh", o), BrokerConfig(linger_ms=0, maintenance=False)) as b:
        b.create_topic("orders", partitions=1)
        for i in range(40):
            b.produce("orders", [Record(key=b"k", value=f"v{i}-{j}".encode()) for j in range(5)])
    base = spark_conf("local[2]", "s3a-by-hand")
    jars = base.get("spark.jars", "")
    extra = ",".join(sorted(glob.glob(f"{sys.argv[1]}/*.jar"))) if len(sys.argv) > 1 else ""
    conf = {
        "spark.jars": ",".join(x for x in [jars, extra] if x),
        "spark.hadoop.fs.s3a.endpoint": srv.endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": "test",
        "spark.hadoop.fs.s3a.secret.key": "test",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        ),
        "spark.ui.enabled": "false",
        "spark.hadoop.fs.s3a.input.stream.type": "classic",
    }
    t0 = time.perf_counter()
    spark = get_spark("local[2]", "s3a-by-hand", conf=conf)
    out["session_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    n = spark.read.format("delta").load("s3a://lake/wh/topics/orders").count()
    out["delta_read_count"] = n
    out["delta_read_s"] = round(time.perf_counter() - t0, 1)
    from topiclake.jobs import compact

    argv = ["--warehouse", "s3a://lake/wh", "--topic", "orders", "--min-files", "2"]
    for k, v in o.items():
        argv += ["--storage-option", f"{k}={v}"]
    t0 = time.perf_counter()
    rc = compact.main(argv)
    out["compact_rc"] = rc
    out["compact_s"] = round(time.perf_counter() - t0, 1)
    with Broker(Storage("s3://lake/wh", o), BrokerConfig(linger_ms=0, maintenance=False)) as b:
        recs = b.fetch("orders", 0, 0, max_records=1000).records
        out["after_offsets_ok"] = recs["offset"].to_pylist() == list(range(200))
        out["after_produce_offset"] = b.produce("orders", [Record(value=b"after")])[0].offset
    from deltalake import DeltaTable

    dt = DeltaTable("s3://lake/wh/topics/orders", storage_options=o)
    out["files_after"] = len(dt.file_uris())
    out["last_op"] = [h.get("operation") for h in dt.history(3)]
    spark.stop()
except Exception as e:
    import traceback

    traceback.print_exc()
    out["error"] = str(e)[:500]
finally:
    srv.stop()
out["total_s"] = round(time.perf_counter() - t_all, 1)
print("RESULT", json.dumps(out))
