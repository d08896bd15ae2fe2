#!/usr/bin/env python3
"""Ratios of alloc_bench's resources from one run's JSON (--benchmark_out_format=json).

    ci/gpu/alloc-ratios.py alloc.json [--markdown]

One row per case (bm_pairs with 1 or 4 streams; bm_random per max size and stream count): each
resource's real time, and each time divided by rmm_pool's (RMM's pool_memory_resource) and by
pool's (faultline's). The issue's target is pool/rmm_pool <= 1.00 in every row. With
--benchmark_repetitions the median is used, else the mean of the runs. Skipped benchmarks (the
message is shown) count as missing.
"""
import argparse
import collections
import json
import re
import statistics
import sys

KINDS = ["pool", "rmm_pool", "async", "device"]
PAIRS = re.compile(r"^bm_pairs/(?P<kind>\w+?)_(?P<streams>\d+)_streams?(/|$)")
RANDOM = re.compile(r"^bm_random/(?P<kind>\w+)/max_mib:(?P<max>\d+)/streams:(?P<streams>\d+)(/|$)")
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def case_of(name):
    if m := PAIRS.match(name):
        return ("pairs", "-", int(m["streams"])), m["kind"]
    if m := RANDOM.match(name):
        return ("random", f"{m['max']} MiB", int(m["streams"])), m["kind"]
    return None, None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args()
    with open(args.json) as f:
        doc = json.load(f)

    runs = collections.defaultdict(list)   # (case, kind) -> real times in ns
    medians = {}
    errors = {}
    for b in doc.get("benchmarks", []):
        case, kind = case_of(b.get("run_name", b["name"]))
        if case is None:
            continue
        if b.get("error_occurred"):
            errors[(case, kind)] = b.get("error_message", "error")
            continue
        ns = b["real_time"] * TO_NS[b.get("time_unit", "ns")]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[(case, kind)] = ns
        else:
            runs[(case, kind)].append(ns)
    times = {k: statistics.mean(v) for k, v in runs.items()}
    times.update(medians)

    cases = sorted({c for c, _ in list(times) + list(errors)}, key=lambda c: (c[0], c[2], int(c[1].split()[0]) if c[1] != "-" else 0))
    header = ["shape", "max", "streams"] + [f"{k} (us)" for k in KINDS] + [f"{k}/rmm_pool" for k in KINDS if k != "rmm_pool"] + ["async/pool", "device/pool"]
    rows = []
    for c in cases:
        t = {k: times.get((c, k)) for k in KINDS}
        def ratio(a, b):
            return f"{t[a] / t[b]:.2f}" if t[a] and t[b] else "-"
        rows.append([c[0], c[1], str(c[2])]
                    + [f"{t[k] / 1e3:.3f}" if t[k] else "skipped" if (c, k) in errors else "-" for k in KINDS]
                    + [ratio(k, "rmm_pool") for k in KINDS if k != "rmm_pool"]
                    + [ratio("async", "pool"), ratio("device", "pool")])
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        for r in [header] + rows:
            print("  ".join(x.rjust(w) for x, w in zip(r, widths)))
    behind = [r for r in rows if r[header.index("pool/rmm_pool")] not in ("-",) and float(r[header.index("pool/rmm_pool")]) > 1.0]
    for (c, k), msg in sorted(errors.items()):
        print(f"skipped: {c[0]} {c[1]} {c[2]} streams {k}: {msg}", file=sys.stderr)
    if behind:
        print(f"pool slower than rmm_pool in {len(behind)} of {len(rows)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
