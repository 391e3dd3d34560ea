#!/usr/bin/env bash
# A cluster of N topiclake brokers on 127.0.0.1 over one warehouse (see docs/cluster.md).
#
#   infra/cluster.sh start N [-- SERVE_ARGS...]   # brokers 1..N on ports 8082..8082+N-1
#   infra/cluster.sh status                       # which brokers are alive, then `topiclake cluster describe`
#   infra/cluster.sh kill I                       # kill -9 broker I (to watch a failover)
#   infra/cluster.sh stop                         # SIGTERM each broker by its pid, SIGKILL after 20 s
#
# Broker i runs `topiclake serve --broker-id i --port BASE+i-1 --host 127.0.0.1 --warehouse W SERVE_ARGS`.
#   W     $TOPICLAKE_WAREHOUSE, default ./data (made absolute, so every broker shares it)
#   BASE  $TOPICLAKE_CLUSTER_BASE_PORT, default 8082
# When `topiclake serve` has --kafka-port / --schema-registry-port, each broker gets
# $TOPICLAKE_CLUSTER_KAFKA_BASE_PORT+i-1 / $TOPICLAKE_CLUSTER_SR_BASE_PORT+i-1 (default 0 each: see serve --help).
# State (pid files, logs, cluster.env) lives in $TOPICLAKE_BROKERS_DIR, default <repo>/.topiclake-brokers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
STATE="${TOPICLAKE_BROKERS_DIR:-$ROOT/.topiclake-brokers}"
BASE_PORT="${TOPICLAKE_CLUSTER_BASE_PORT:-8082}"
KAFKA_BASE="${TOPICLAKE_CLUSTER_KAFKA_BASE_PORT:-0}"
SR_BASE="${TOPICLAKE_CLUSTER_SR_BASE_PORT:-0}"
TOPICLAKE=("$PYTHON" -m topiclake.cli)

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

alive() { # pid -> 0 when that pid is a running topiclake broker
  local pid="$1"
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && grep -qa "topiclake" "/proc/$pid/cmdline" 2>/dev/null
}

pid_of() { cat "$STATE/broker-$1.pid" 2>/dev/null || true; }

broker_ids() {
  local f
  for f in "$STATE"/broker-*.pid; do
    [[ -e "$f" ]] || continue
    f="${f##*/broker-}"; echo "${f%.pid}"
  done | sort -n
}

port_of() { sed -n "s/^BROKER_$1_PORT=//p" "$STATE/cluster.env" 2>/dev/null; }

healthy() { # port -> 0 when /healthz answers 200
  "$PYTHON" - "$1" <<'EOF' >/dev/null 2>&1
import sys, httpx
sys.exit(0 if httpx.get(f"http://127.0.0.1:{sys.argv[1]}/healthz", timeout=1).status_code == 200 else 1)
EOF
}

cmd_start() {
  local n="${1:-}"; shift || true
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "start needs a broker count N >= 1" >&2; usage 2; }
  if [[ "${1:-}" == "--" ]]; then shift; fi
  local extra=("$@")
  mkdir -p "$STATE"
  local id
  for id in $(broker_ids); do
    if alive "$(pid_of "$id")"; then
      echo "broker $id is running already (pid $(pid_of "$id")): infra/cluster.sh stop first" >&2
      exit 1
    fi
    rm -f "$STATE/broker-$id.pid"
  done
  local warehouse="${TOPICLAKE_WAREHOUSE:-./data}"
  if [[ "$warehouse" != *://* && "$warehouse" != /* ]]; then warehouse="$PWD/${warehouse#./}"; fi
  local help; help="$("${TOPICLAKE[@]}" serve --help 2>/dev/null || true)"
  {
    echo "BROKERS=$n"
    echo "WAREHOUSE=$warehouse"
  } >"$STATE/cluster.env"
  local i port args
  for ((i = 1; i <= n; i++)); do
    port=$((BASE_PORT + i - 1))
    args=(serve --broker-id "$i" --host 127.0.0.1 --port "$port" --warehouse "$warehouse")
    if grep -q -- "--kafka-port" <<<"$help"; then
      args+=(--kafka-port "$([[ "$KAFKA_BASE" == 0 ]] && echo 0 || echo $((KAFKA_BASE + i - 1)))")
    fi
    if grep -q -- "--schema-registry-port" <<<"$help"; then
      args+=(--schema-registry-port "$([[ "$SR_BASE" == 0 ]] && echo 0 || echo $((SR_BASE + i - 1)))")
    fi
    args+=("${extra[@]}")
    echo "BROKER_${i}_PORT=$port" >>"$STATE/cluster.env"
    nohup "${TOPICLAKE[@]}" "${args[@]}" >>"$STATE/broker-$i.log" 2>&1 </dev/null &
    echo $! >"$STATE/broker-$i.pid"
    echo "broker $i: pid $!, http://127.0.0.1:$port, log $STATE/broker-$i.log"
  done
  local deadline=$((SECONDS + 60))
  for ((i = 1; i <= n; i++)); do
    port=$((BASE_PORT + i - 1))
    until healthy "$port"; do
      if ! alive "$(pid_of "$i")"; then
        echo "broker $i exited; the end of its log:" >&2
        tail -n 20 "$STATE/broker-$i.log" >&2
        exit 1
      fi
      if ((SECONDS > deadline)); then echo "broker $i did not answer in 60 s" >&2; exit 1; fi
      sleep 0.2
    done
  done
  echo "cluster of $n broker(s) over $warehouse; bootstrap: $(bootstrap_list)"
}

bootstrap_list() {
  local id out=()
  for id in $(broker_ids); do
    if alive "$(pid_of "$id")"; then out+=("127.0.0.1:$(port_of "$id")"); fi
  done
  local IFS=,; echo "${out[*]}"
}

cmd_status() {
  local id pid up=0
  [[ -d "$STATE" ]] || { echo "no cluster started from here ($STATE)"; exit 3; }
  for id in $(broker_ids); do
    pid="$(pid_of "$id")"
    if alive "$pid"; then
      up=$((up + 1)); echo "broker $id: alive, pid $pid, http://127.0.0.1:$(port_of "$id")"
    else
      echo "broker $id: dead (pid $pid), log $STATE/broker-$id.log"
    fi
  done
  if ((up == 0)); then echo "no broker is alive"; exit 3; fi
  "${TOPICLAKE[@]}" cluster describe --bootstrap-server "$(bootstrap_list)" --timeout 10
}

cmd_kill() {
  local id="${1:-}" pid
  [[ "$id" =~ ^[0-9]+$ ]] || { echo "kill needs a broker id" >&2; usage 2; }
  pid="$(pid_of "$id")"
  if alive "$pid"; then kill -9 "$pid"; echo "killed -9 broker $id (pid $pid)"; else echo "broker $id is not running"; fi
}

cmd_stop() {
  local id pid waited
  for id in $(broker_ids); do
    pid="$(pid_of "$id")"
    if alive "$pid"; then kill -TERM "$pid"; fi
  done
  for id in $(broker_ids); do
    pid="$(pid_of "$id")"
    waited=0
    while alive "$pid" && ((waited < 100)); do sleep 0.2; waited=$((waited + 1)); done
    if alive "$pid"; then kill -9 "$pid"; echo "broker $id (pid $pid) did not stop in 20 s: killed -9"; fi
    rm -f "$STATE/broker-$id.pid"
    echo "broker $id stopped"
  done
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  status) cmd_status ;;
  kill) shift; cmd_kill "$@" ;;
  stop) cmd_stop ;;
  -h | --help | help) usage 0 ;;
  *) usage 2 ;;
esac
