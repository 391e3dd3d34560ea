#!/usr/bin/env bash
# spark-submit a topiclake job to a Spark cluster with the packed Python environment.
#
#   infra/submit.sh compact --warehouse /abs/path/data --topic orders --min-files 4
#   infra/submit.sh --master spark://127.0.0.1:7077 retention --warehouse s3://bucket/wh --topic orders
#   infra/submit.sh probe                 # which Python / deltalake / topiclake the executors run
#   infra/submit.sh --pack-only           # build (or find) the cached environment archive and print it
#
# Jobs: compact, retention, compact-keys, vacuum, reprocess, register-tables, probe, or MODULE[:FUNCTION].
# The master defaults to $TOPICLAKE_SPARK_MASTER, else the cluster started by infra/spark-cluster.sh.
# Implemented by topiclake.jobs.submit (python -m topiclake.jobs.submit --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
export TOPICLAKE_CLUSTER_DIR="${TOPICLAKE_CLUSTER_DIR:-$ROOT/.spark-cluster}"
exec "$PYTHON" -m topiclake.jobs.submit "$@"
