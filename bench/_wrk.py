"""wrk, the compiled HTTP load generator: a Lua script per load, one JSON line of results per run.

A Python client tops out near 400 requests/s on this machine (DESIGN §9), so every HTTP benchmark measures
the server with wrk (Debian package; ``make tools-wrk`` installs it). The body may be text or bytes (Arrow
IPC): it is read from a file by the script.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

MARK = "WRKJSON "
#: wrk's end of run: one line, MARK then JSON, with the counts and latencies (a %-template: %(mark)s)
DONE_LUA = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '%(mark)s{"requests": %%d, "duration_us": %%d, "connect": %%d, "read": %%d, "write": %%d, ' ..
    '"status": %%d, "timeout": %%d, "p50_us": %%d, "p99_us": %%d, "max_us": %%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""

LUA = (
    """
wrk.method = "%(method)s"
%(headers)s
local bodies = {}
for _, name in ipairs({%(body_files)s}) do
  local f = io.open(name, "rb")
  bodies[#bodies + 1] = f:read("*all")
  f:close()
end
wrk.body = bodies[1]
local paths = {%(paths)s}
local n = 0
request = function()
  n = n + 1
  if #bodies == 1 then
    return wrk.format(nil, paths[(n %% #paths) + 1])
  end
  return wrk.format(nil, paths[(n %% #paths) + 1], nil, bodies[(n %% #bodies) + 1])
end
"""
    + DONE_LUA
)


@dataclass(frozen=True)
class WrkRun:
    """What one wrk run measured."""

    requests: int
    seconds: float
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @property
    def ok(self) -> int:
        return max(0, self.requests - self.errors)

    @property
    def requests_per_s(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def available() -> bool:
    """Whether wrk is installed."""
    return shutil.which("wrk") is not None


def version() -> str:
    out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"wrk (\S+)", out.stdout + out.stderr)
    return match.group(1) if match else "unknown"


def start(
    url: str,
    paths: list[str],
    body: bytes,
    root: Path,
    name: str,
    connections: int,
    seconds: float,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    bodies: list[bytes] | None = None,
) -> subprocess.Popen[str]:
    """Start wrk (one thread) against ``url`` cycling through ``paths`` (and ``bodies``, when given,
    e.g. single records with different keys); read it with :func:`result`."""
    body_files = []
    for i, b in enumerate(bodies or [body]):
        body_files.append(root / f"{name}.{i}.body")
        body_files[-1].write_bytes(b)
    lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in (headers or {}).items())
    script = root / f"{name}.lua"
    script.write_text(
        LUA
        % {
            "method": method,
            "headers": lines,
            "body_files": ", ".join(f'"{f}"' for f in body_files),
            "paths": ", ".join(f'"{p}"' for p in paths),
            "mark": MARK,
        }
    )
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    return subprocess.Popen(
        [*cmd, "-s", str(script), url], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def result(proc: subprocess.Popen[str]) -> WrkRun:
    """Wait for a wrk run and parse its result line."""
    out, _ = proc.communicate(timeout=300)
    for line in out.splitlines():
        if line.startswith(MARK):
            d = json.loads(line[len(MARK) :])
            errors = sum(d[k] for k in ("connect", "read", "write", "status", "timeout"))
            return WrkRun(
                d["requests"],
                d["duration_us"] / 1e6,
                errors,
                d["p50_us"] / 1000,
                d["p99_us"] / 1000,
                d["max_us"] / 1000,
            )
    raise RuntimeError(f"wrk gave no result (exit {proc.returncode}):\n{out[-2000:]}")


def run(*args: object, **kwargs: object) -> WrkRun:
    """:func:`start` and wait for its :func:`result`."""
    return result(start(*args, **kwargs))  # type: ignore[arg-type]
