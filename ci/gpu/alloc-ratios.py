#!/usr/bin/env python3
"""Ratios of alloc_bench's resources from one run's JSON (--benchmark_out_format=json).

    ci/gpu/alloc-ratios.py alloc.json [more.json...] [--markdown]

One row per case (bm_pairs with 1 or 4 streams; bm_random per max size and stream count): each
resource's real time, and each time divided by rmm_pool's (RMM's pool_memory_resource) and by
pool's (faultline's). The issue's target is pool/rmm_pool <= 1.00 in every row. With
--benchmark_repetitions the median is used, else the mean of the runs. Skipped benchmarks (the
message is shown) count as missing. Several files (e.g. the pairs and the random shape run
apart) are read as one run.

ci/gpu/record.py imports parse() and rows() (the file name has a dash: through importlib).
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
    """((shape, max, streams), kind) of a benchmark name, or (None, None)."""
    if m := PAIRS.match(name):
        return ("pairs", "-", int(m["streams"])), m["kind"]
    if m := RANDOM.match(name):
        return ("random", f"{m['max']} MiB", int(m["streams"])), m["kind"]
    return None, None


def parse(doc, into=None):
    """alloc_bench's cases of one JSON document (a dict), merged into `into` when given:
    {"times": {(case, kind): ns}, "stddev": {(case, kind): ns}, "errors": {(case, kind): message},
     "labels": {(case, kind): label}}. times are the median of the repetitions, else the mean of
    the runs; a case with no successful run is in errors only."""
    out = into if into is not None else {"times": {}, "stddev": {}, "errors": {}, "labels": {}}
    runs = collections.defaultdict(list)   # (case, kind) -> real times in ns
    for b in doc.get("benchmarks", []):
        case, kind = case_of(b.get("run_name", b.get("name", "")))
        if case is None:
            continue
        if b.get("error_occurred"):
            out["errors"].setdefault((case, kind), b.get("error_message", "error"))
            continue
        ns = b["real_time"] * TO_NS[b.get("time_unit", "ns")]
        if b.get("label"):
            out["labels"][(case, kind)] = b["label"]
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                out["times"][(case, kind)] = ns
            elif b.get("aggregate_name") == "stddev":
                out["stddev"][(case, kind)] = ns
        else:
            runs[(case, kind)].append(ns)
    for k, v in runs.items():
        out["times"].setdefault(k, statistics.mean(v))
        if len(v) > 1:
            out["stddev"].setdefault(k, statistics.stdev(v))
    # An error beside successful repetitions: the times stand, the error is kept for the record.
    return out


def case_key(c):
    return (c[0], c[2], int(c[1].split()[0]) if c[1] != "-" else 0)


def rows(parsed):
    """The side-by-side table: (header, rows of strings), times in microseconds."""
    times, errors = parsed["times"], parsed["errors"]
    cases = sorted({c for c, _ in list(times) + list(errors)}, key=case_key)
    header = (["shape", "max", "streams"] + [f"{k} (us)" for k in KINDS]
              + [f"{k}/rmm_pool" for k in KINDS if k != "rmm_pool"] + ["async/pool", "device/pool"])
    out = []
    for c in cases:
        t = {k: times.get((c, k)) for k in KINDS}

        def ratio(a, b):
            return f"{t[a] / t[b]:.2f}" if t[a] and t[b] else "-"
        out.append([c[0], c[1], str(c[2])]
                   + [f"{t[k] / 1e3:.3f}" if t[k] else "skipped" if (c, k) in errors else "-" for k in KINDS]
                   + [ratio(k, "rmm_pool") for k in KINDS if k != "rmm_pool"]
                   + [ratio("async", "pool"), ratio("device", "pool")])
    return header, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = ap.parse_args()
    parsed = None
    for path in args.json:
        with open(path) as f:
            parsed = parse(json.load(f), parsed)
    header, table = rows(parsed)
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for r in table:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(h), *(len(r[i]) for r in table)) if table else len(h) for i, h in enumerate(header)]
        for r in [header] + table:
            print("  ".join(x.rjust(w) for x, w in zip(r, widths)))
    col = header.index("pool/rmm_pool")
    behind = [r for r in table if r[col] != "-" and float(r[col]) > 1.0]
    for (c, k), msg in sorted(parsed["errors"].items(), key=lambda e: (case_key(e[0][0]), e[0][1])):
        print(f"skipped: {c[0]} {c[1]} {c[2]} streams {k}: {msg}", file=sys.stderr)
    if behind:
        print(f"pool slower than rmm_pool in {len(behind)} of {len(table)} cases", file=sys.stderr)


if __name__ == "__main__":
    main()
