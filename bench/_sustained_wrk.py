"""The sustained benchmark's producers as wrk (``bench/sustained.py --producers wrk``, issue 25 item 3).

The Python producer threads of bench/_sustained_load.py add their own time to the produce p99 they see
(45-105 ms measured: a Python client tops out near 400 requests/s here, DESIGN §9). Here the same load
comes from wrk: 32 threads with one connection each (``-t32 -c32``), so each Lua state has exactly one
request in flight and knows which record an answer is for. (wrk also calls the first thread's ``request()``
once before it connects, to check the request parses; that call is not logged.) A request is the same
single-record JSON request, acks=all, whose value carries ``TT-SSSSSSSSS`` (thread, sequence) as the Python
producers' do,
to partition ``thread % 4``. One wrk run per report window gives that window's latency percentiles (wrk's
own histogram, in C); each thread logs every record it sent (``S seq``) and what came back (``A seq
partition offset``, ``T seq`` throttled, ``E seq status``) to a file of its own, read back into
:class:`ProducerState` for the exactly-once check: a record sent without an answer (in flight when the run
ended) is uncertain.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from _sustained_load import PARTITIONS, POS_SHIFT, PRODUCERS, TOPIC, VALUE_CHARS, ProducerState, key_of
from _wrk import DONE_LUA, MARK

SEQ_PER_RUN = 10_000_000  # run w numbers its records from w * SEQ_PER_RUN + 1: ids never repeat

LUA = (
    """
local counter = 0
function setup(thread)
  thread:set("id", counter)
  counter = counter + 1
end

function init(args)
  local dir, run = args[1], tonumber(args[2])
  seq = run * %(seq_per_run)d
  pending = nil
  -- wrk calls the first thread's request() once before any connection, to check the request parses
  -- (script_verify_request): that request is never sent, so it is neither logged nor numbered
  unsent = (id == 0)
  local partition = id %% %(partitions)d
  log = io.open(string.format("%%s/w%%03d-t%%02d.log", dir, run, id), "w")
  log:setvbuf("line")
  path = "/v1/topics/%(topic)s/records?acks=all"
  headers = {["content-type"] = "application/json"}
  head = '{"records":[{"partition":' .. partition .. ',"value":"'
  tail = '"}]}'
end

function request()
  if unsent then
    unsent = false
    return wrk.format("POST", path, headers, head .. string.rep(".", %(value_chars)d) .. tail)
  end
  seq = seq + 1
  pending = seq
  log:write("S ", seq, "\\n")
  local id_text = string.format("%%02d-%%09d", id, seq)
  local value = id_text .. string.rep(".", %(value_chars)d - #id_text)
  return wrk.format("POST", path, headers, head .. value .. tail)
end

function response(status, hdrs, body)
  if pending == nil then return end
  local p, o = string.match(body, '"partition":(%%d+),"offset":(%%d+)')
  if status == 200 and o ~= nil and string.find(body, '"error":null', 1, true) then
    log:write("A ", pending, " ", p, " ", o, "\\n")
  elseif status == 429 or status == 503 then
    log:write("T ", pending, "\\n")
  else
    log:write("E ", pending, " ", status, "\\n")
  end
  pending = nil
end

"""
    + DONE_LUA
)


@dataclass(frozen=True)
class WindowRun:
    """What one window's wrk run measured (latencies of completed requests, wrk's histogram)."""

    requests: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class WrkProducers:
    """The 32 single-record producers as one wrk process per window; logs under ``root``."""

    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.script = root / "producers.lua"
        self.script.write_text(
            LUA
            % {
                "seq_per_run": SEQ_PER_RUN,
                "partitions": PARTITIONS,
                "topic": TOPIC,
                "value_chars": VALUE_CHARS,
                "mark": MARK,
            }
        )
        self.states = [ProducerState() for _ in range(PRODUCERS)]
        self.proc: subprocess.Popen[str] | None = None
        self.window = -1

    def start(self, window: int, seconds: float) -> None:
        """Produce for ``seconds`` (whole seconds, at least one) as window ``window``."""
        self.window = window
        cmd = ["wrk", f"-t{PRODUCERS}", f"-c{PRODUCERS}", f"-d{max(1, round(seconds))}s", "--timeout", "30s"]
        cmd += ["-s", str(self.script), self.url, "--", str(self.root), str(window)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def finish(self) -> WindowRun:
        """Wait for the window's run, read its logs into :attr:`states`, return wrk's figures."""
        assert self.proc is not None
        out, _ = self.proc.communicate(timeout=120)
        self.proc = None
        run: WindowRun | None = None
        for line in out.splitlines():
            if line.startswith(MARK):
                d = json.loads(line[len(MARK) :])
                errors = sum(d[k] for k in ("connect", "read", "write", "status", "timeout"))
                run = WindowRun(
                    d["requests"], errors, d["p50_us"] / 1000, d["p99_us"] / 1000, d["max_us"] / 1000
                )
        if run is None:
            raise RuntimeError(f"wrk gave no result:\n{out[-2000:]}")
        for thread, state in enumerate(self.states):
            self._read_log(thread, state)
        return run

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def _read_log(self, thread: int, state: ProducerState) -> None:
        w = self.window
        path = self.root / f"w{w:03d}-t{thread:02d}.log"
        sent: set[int] = set()
        answered: set[int] = set()
        for line in path.read_text().splitlines() if path.exists() else []:
            kind, seq, *rest = line.split()
            s = int(seq)
            if kind == "S":
                sent.add(s)
                continue
            answered.add(s)
            key = key_of(thread, s)
            if kind == "A":
                state.keys.append(key)
                state.positions.append((int(rest[0]) << POS_SHIFT) | int(rest[1]))
                state.acked[w] = state.acked.get(w, 0) + 1
            elif kind == "T":
                state.refused.append(key)
                state.throttled[w] = state.throttled.get(w, 0) + 1
            else:
                state.refused.append(key)
                state.errors[w] = state.errors.get(w, 0) + 1
                state.failure = f"HTTP {rest[0] if rest else '?'}"
        for s in sorted(sent - answered):
            state.uncertain.append(key_of(thread, s))
