#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 from the pyspark distribution in .venv: one master, one worker.
#
#   infra/spark-cluster.sh start [--port 7077 --webui-port 8080 --worker-webui-port 8081 --cores 2 --memory 2g]
#   infra/spark-cluster.sh status     # URLs and pids; exit 3 when not running
#   infra/spark-cluster.sh stop
#
# State (logs/, work/, pid files, cluster.json) lives in $TOPICLAKE_CLUSTER_DIR, default <repo>/.spark-cluster.
# Implemented by topiclake.jobs.cluster (python -m topiclake.jobs.cluster --help).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
export TOPICLAKE_CLUSTER_DIR="${TOPICLAKE_CLUSTER_DIR:-$ROOT/.spark-cluster}"
exec "$PYTHON" -m topiclake.jobs.cluster "$@"
