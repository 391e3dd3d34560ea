"""The sustained benchmark's report (bench/sustained.py): windows, the exactly-once check, verdicts and
the Markdown tables."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

import numpy as np

import _common
from _sustained_load import (
    CONFIG,
    PARTITIONS,
    POS_SHIFT,
    PRODUCERS,
    GroupState,
    ProducerState,
    ReaderState,
    keys_of_values,
)
from _sustained_measure import TopicTable


@dataclass
class Window:
    window: int
    start_s: float
    end_s: float
    records: int
    records_per_s: float
    produce_p50_ms: float | None
    produce_p99_ms: float | None
    gateway_produce_p50_ms: float | None
    gateway_produce_p99_ms: float | None
    produce_errors: int
    throttled: int
    commits: int
    commits_per_s: float
    records_per_commit: float | None
    commit_p50_ms: float | None
    commit_p99_ms: float | None
    log_commit_p99_ms: float | None
    gateway_commits: int
    gateway_records_per_commit: float | None
    compactions: int
    active_files_max: int
    active_files_end: list[int]
    active_files_bound: int
    within_bound: bool  # every sample under its bound plus round_allowance
    delta_log_files_max: int
    delta_log_files_end: int
    rss_mb_max: float | None
    rss_mb_end: float | None
    reader_lag: int
    group_lag: int
    store_requests_per_s: dict[str, float] | None = None  # S3 only: the gateway's, by operation
    compaction_runs_logged: int | None = None  # "compacted N files" lines of the gateway (log level info)
    files_compacted_logged: int | None = None
    # wrk producers: the errors wrk counted (connect, read, write, timeout, non-2xx); a failed connection
    # loses the one request in flight on it, which has no answer then (uncertain), as the one in flight on
    # each connection when the window's run ends
    client_errors: int | None = None
    # the window's longest maintenance round (an upper bound, from the gateway's histogram) and the files a
    # partition may gain beyond the bound's N while it runs (_sustained_measure.round_allowance)
    maintenance_round_max_s: float | None = None
    round_allowance: int = 0


@dataclass
class Verdict:
    target: str
    first: float | None
    last: float | None
    limit: str
    met: bool | None
    note: str = ""


def ratio_verdict(name: str, first: float | None, last: float | None, limit: float) -> Verdict:
    met = None if first is None or last is None or first <= 0 else last <= limit * first
    return Verdict(name, first, last, f"last ≤ {limit}x first", met)


def r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def verify(
    producers: list[ProducerState],
    readers: list[ReaderState],
    group: GroupState,
    table: TopicTable,
) -> dict[str, Any]:
    """Every acknowledged record read back: exactly once by each reader (at the acknowledged position),
    at least once by the group, exactly once in the Delta table."""
    acked_keys = np.concatenate([np.frombuffer(s.keys, dtype=np.int64) for s in producers] or [np.empty(0)])
    acked_pos = np.concatenate([np.frombuffer(s.positions, dtype=np.int64) for s in producers])
    refused = np.concatenate([np.frombuffer(s.refused, dtype=np.int64) for s in producers])
    uncertain = np.concatenate([np.frombuffer(s.uncertain, dtype=np.int64) for s in producers])
    order = np.argsort(acked_keys)
    acked_keys, acked_pos = acked_keys[order], acked_pos[order]
    out: dict[str, Any] = {
        "acked": int(acked_keys.size),
        "refused": int(refused.size),
        "uncertain": int(uncertain.size),
        "acked_position_collisions": int(acked_pos.size - np.unique(acked_pos).size),
    }

    def check(keys: np.ndarray, positions: np.ndarray | None) -> dict[str, Any]:
        uniq, counts = np.unique(keys, return_counts=True)
        present = np.isin(acked_keys, uniq)
        dup = np.isin(acked_keys, uniq[counts > 1])
        res: dict[str, Any] = {
            "read": int(keys.size),
            "acked_missing": int((~present).sum()),
            "acked_duplicated": int(dup.sum()),
            "duplicate_reads": int((counts - 1).sum()),
            "refused_present": int(np.isin(refused, uniq).sum()),
            "uncertain_present": int(np.isin(uncertain, uniq).sum()),
            "unknown": int((~np.isin(uniq, np.concatenate([acked_keys, refused, uncertain]))).sum()),
        }
        if positions is not None:
            idx = np.searchsorted(acked_keys, keys)
            idx = np.minimum(idx, max(acked_keys.size - 1, 0))
            is_acked = acked_keys.size > 0 and (acked_keys[idx] == keys)
            res["wrong_position"] = int(np.sum(is_acked & (acked_pos[idx] != positions)))
        return res

    for r in readers:
        keys = np.concatenate(r.keys) if r.keys else np.empty(0, np.int64)
        pos = np.concatenate(r.positions) if r.positions else np.empty(0, np.int64)
        res = check(keys, pos)
        res["offset_gaps"] = r.gaps
        res["exactly_once"] = (
            res["acked_missing"] == 0
            and res["duplicate_reads"] == 0
            and res["wrong_position"] == 0
            and r.gaps == 0
            and res["unknown"] == 0
            and res["refused_present"] == 0
        )
        out[r.name] = res
    res = check(np.frombuffer(group.keys, dtype=np.int64), None)
    res["at_least_once"] = res["acked_missing"] == 0 and res["unknown"] == 0
    out["group"] = res
    rows = table.delta_table().to_pyarrow_table(columns=["partition", "offset", "value"])
    tpos = (np.asarray(rows["partition"].to_numpy(), dtype=np.int64) << POS_SHIFT) | np.asarray(
        rows["offset"].to_numpy(), dtype=np.int64
    )
    res = check(keys_of_values(rows["value"]), tpos)
    res["offset_duplicates"] = int(tpos.size - np.unique(tpos).size)
    res["exactly_once"] = (
        res["acked_missing"] == 0
        and res["duplicate_reads"] == 0
        and res["wrong_position"] == 0
        and res["offset_duplicates"] == 0
        and res["unknown"] == 0
        and res["refused_present"] == 0
    )
    out["table"] = res
    out["exactly_once"] = bool(
        out["acked"] > 0
        and out["acked_position_collisions"] == 0
        and all(out[r.name]["exactly_once"] for r in readers)
        and out["table"]["exactly_once"]
        and out["group"]["at_least_once"]
    )
    return out


def verdicts(windows: list[Window], check: dict[str, Any]) -> list[Verdict]:
    first, last = windows[0], windows[-1]
    out = [
        ratio_verdict("produce p99 ms (client)", first.produce_p99_ms, last.produce_p99_ms, 2),
        ratio_verdict(
            "produce p99 ms (gateway histogram)", first.gateway_produce_p99_ms, last.gateway_produce_p99_ms, 2
        ),
        ratio_verdict("commit p99 ms (gateway histogram)", first.commit_p99_ms, last.commit_p99_ms, 2),
    ]
    worst = max(windows, key=lambda w: w.active_files_max - w.active_files_bound - w.round_allowance)
    out.append(
        Verdict(
            "active files per partition (max of the window's samples)",
            first.active_files_max,
            last.active_files_max,
            "< bound in every sample",
            all(w.within_bound for w in windows),
            f"closest: window {worst.window}, {worst.active_files_max} files, "
            f"bound {worst.active_files_bound} + {worst.round_allowance} (longest round "
            f"<= {worst.maintenance_round_max_s} s); bound = (compact_min_files - 1) * tiers "
            f"+ compact_min_files, N = {CONFIG.compact_min_files}, plus what a partition commits beyond N "
            "during the window's longest round",
        )
    )
    v = ratio_verdict("gateway RSS MiB (end of window)", first.rss_mb_end, last.rss_mb_end, 1.5)
    v.note = "first window = warm-up"
    out.append(v)
    out.append(
        Verdict(
            "every acknowledged record read back exactly once",
            None,
            float(check["acked"]),
            "reader + catch-up reader + table exactly once, group at least once",
            bool(check["exactly_once"]),
            f"group duplicates: {check['group']['duplicate_reads']}",
        )
    )
    out.append(
        Verdict("records/s (information)", first.records_per_s, last.records_per_s, "", None, "not a target")
    )
    return out


def machine(args: argparse.Namespace, seconds: float) -> dict[str, str]:
    return _common.machine(
        gateway="topiclake serve, 1 uvicorn worker, default broker settings (maintenance on)",
        load=f"{PRODUCERS} producers ({'wrk -t32 -c32' if args.producers == 'wrk' else 'Python threads'}; "
        "1 record/request, acks=all, 100 B), 1 group member, "
        f"1 reader, {PARTITIONS} partitions, {seconds:g} s in windows of {args.window_seconds:g} s",
        broker=f"linger_ms={CONFIG.linger_ms}, checkpoint_interval={CONFIG.checkpoint_interval}, "
        f"log_retention_ms={CONFIG.log_retention_ms}, compact_min_files={CONFIG.compact_min_files}, "
        f"maintenance_interval_ms={CONFIG.maintenance_interval_ms}",
    )


def markdown(report: dict[str, Any]) -> str:
    def allowance(w: dict[str, Any]) -> str:  # files beyond N while a slow round ran (0: rounds kept up)
        return f" + {w['round_allowance']}" if w.get("round_allowance") else ""

    def num(x: float | None, digits: int = 1) -> str:
        return "" if x is None else f"{x:,.{digits}f}"

    lines = [
        "# Sustained load",
        "",
        ", ".join(f"{k}: {v}" for k, v in report["machine"].items()),
        "",
        "produce ms: client-side latency of acknowledged requests (p50/p99); gw ms: the gateway's "
        "`topiclake_produce_latency_seconds` histogram over the window (interpolated within buckets). "
        "commit ms: the gateway's `topiclake_topic_commit_latency_seconds` histogram over the window (the "
        "group commit, either path: local append or delta-rs); rec/commit: records per commit from "
        "`_delta_log`. "
        "files: active files per partition (max over the window's samples; at the window's end per "
        "partition) and the documented bound (+ the files a partition commits beyond N during the window's "
        "longest maintenance round, when rounds fall behind). Lags in records at the window's end.",
        "",
        "| window | end s | records/s | produce p50 ms | produce p99 ms | gw p50 ms | gw p99 ms | errors "
        "| commits/s | rec/commit | commit p50 ms | commit p99 ms | compactions | files max | files end "
        "| bound | _delta_log | RSS MiB | reader lag | group lag |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for w in report["windows"]:
        errors = f"{w['produce_errors']:,}" + (f" (+{w['throttled']:,} thr.)" if w["throttled"] else "")
        lines.append(
            f"| {w['window']} | {w['end_s']:.0f} | {num(w['records_per_s'], 0)} | {num(w['produce_p50_ms'])} "
            f"| {num(w['produce_p99_ms'])} | {num(w['gateway_produce_p50_ms'])} "
            f"| {num(w['gateway_produce_p99_ms'])} | {errors} | {num(w['commits_per_s'])} "
            f"| {num(w['records_per_commit'])} | {num(w['commit_p50_ms'])} | {num(w['commit_p99_ms'])} "
            f"| {w['compactions']} | {w['active_files_max']} | {'/'.join(map(str, w['active_files_end']))} "
            f"| {w['active_files_bound']}{allowance(w)} | {w['delta_log_files_max']} "
            f"| {num(w['rss_mb_end'])} "
            f"| {w['reader_lag']:,} | {w['group_lag']:,} |"
        )
    if any(w.get("compaction_runs_logged") or w.get("store_requests_per_s") for w in report["windows"]):
        lines += [
            "",
            "Maintenance and object store: compaction runs and the files they merged, from the gateway's "
            "log (`compacted N files`, log level info); on S3, the gateway's requests per second by "
            "operation (counted by its proxy) and this benchmark's own (samples, log watcher).",
            "",
            "| window | compaction runs | files merged | files per run | S3 requests/s |",
            "|---:|---:|---:|---:|---|",
        ]
        for w in report["windows"]:
            runs, merged = w.get("compaction_runs_logged") or 0, w.get("files_compacted_logged") or 0
            reqs = w.get("store_requests_per_s") or {}
            gw = {op: n for op, n in reqs.items() if not op.startswith("bench:")}
            per_op = ", ".join(f"{op} {n:,.1f}" for op, n in gw.items())
            total = f" (total {sum(gw.values()):,.1f}" if gw else ""
            bench = sum(n for op, n in reqs.items() if op.startswith("bench:"))
            total += f"; this benchmark's reads {bench:,.1f})" if gw else ""
            lines.append(
                f"| {w['window']} | {runs} | {merged} | {num(merged / runs if runs else None)} "
                f"| {per_op}{total} |"
            )
    lines += ["", "| target | first | last | limit | met | note |", "|---|---:|---:|---|---|---|"]
    for v in report["verdicts"]:
        met = "" if v["met"] is None else ("yes" if v["met"] else "**no**")
        lines.append(
            f"| {v['target']} | {num(v['first'])} | {num(v['last'])} | {v['limit']} | {met} | {v['note']} |"
        )
    c = report["check"]
    lines += [
        "",
        f"Acknowledged: {c['acked']:,}; refused (error answer, must not be stored): {c['refused']:,}; "
        f"uncertain (no answer): {c['uncertain']:,}.",
        "",
        "| read by | read | acked missing | duplicate reads | wrong position | offset gaps | exactly once |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for name in ("reader", "catchup_reader", "table", "group"):
        r = c[name]
        once = r.get("exactly_once", r.get("at_least_once"))
        label = name + (" (at least once)" if name == "group" else "")
        lines.append(
            f"| {label} | {r['read']:,} | {r['acked_missing']:,} | {r['duplicate_reads']:,} "
            f"| {r.get('wrong_position', '')} | {r.get('offset_gaps', r.get('offset_duplicates', ''))} "
            f"| {'yes' if once else '**no**'} |"
        )
    e = report["end"]
    lines += [
        "",
        f"End: producers stopped at {e['produce_seconds']:.1f} s; reader caught up in "
        f"{num(e['reader_catchup_s'], 2)} s, group in {num(e['group_catchup_s'], 2)} s; catch-up reader "
        f"read everything from offset 0 in {num(e['catchup_reader_s'], 2)} s; "
        f"_delta_log commits missed by the watcher: {e['log_versions_missed']}; "
        f"gateway log warnings: {e['gateway_warnings']}.",
    ]
    return "\n".join(lines) + "\n"
