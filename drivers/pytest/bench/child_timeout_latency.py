#!/usr/bin/env python3
"""How long from a child exceeding its timeout to the parent's clean failure, for each layer.

The anchor's child ran past its parent's 30 s wait and the CI runner hung for hours. Each layer of
the defence turns that into a failure of the test; this measures how soon, on this machine:

  checked     the wait is checked: join(child_timeout(C)), then kill_survivors() and pytest.fail
  leftover    the wait is ignored; faultline_children kills the child at the start of teardown,
              before the pool fixture closes, and faultline_children_leftovers = fail fails it
  outer       the wait is ignored and the pool fixture is closed first (the naive fixture order):
              teardown blocks until the outer timeout B kills the child and interrupts the test
  unbounded   join() without a timeout: the outer timeout B ends it

Each case runs REPEAT times in one inner pytest session (the plugin loaded as users get it). The
child "exceeds its timeout" when the parent's join(C) returns (for 'unbounded', when C has passed);
the failure is when pytest makes the test's first failed report; "ended" is when its teardown has
finished (children reaped). The target: failure within the outer budget B minus 10%.

    python drivers/pytest/bench/child_timeout_latency.py [--repeat 5] [--child 1.0] [--budget 3.0] [--json F]
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = r'''
import json, multiprocessing, os, time
import pytest
from faultline_pytest import child_timeout, kill_survivors

CHILD_S = float(os.environ["BENCH_CHILD_S"])
BUDGET_S = float(os.environ["BENCH_BUDGET_S"])
RECORD = os.environ["BENCH_RECORD"]
REPEAT = int(os.environ["BENCH_REPEAT"])

def note(nodeid, **kw):
    with open(RECORD, "a") as f:
        f.write(json.dumps(dict(test=nodeid, **kw)) + "\n")

class Pool:
    """close() returns once no child holds an import (a pipe's write end; close reads to EOF)."""
    def __init__(self):
        self._r, self._w = os.pipe()
    def close(self):
        os.close(self._w)
        while os.read(self._r, 4096):
            pass
        os.close(self._r)

def hang():
    time.sleep(600)

def start_child():
    child = multiprocessing.get_context("fork").Process(target=hang)
    child.start()
    return child

@pytest.fixture
def pool_after_children(faultline_children):   # the fixed order: children killed before close
    p = Pool(); yield p; p.close()

@pytest.fixture
def pool_naive():                               # closed while the child still holds it
    p = Pool(); yield p; p.close()

cases = pytest.mark.parametrize("i", range(REPEAT))

@cases
@pytest.mark.faultline_timeout(BUDGET_S)
def test_checked(i, request):
    child = start_child()
    child.join(child_timeout(CHILD_S))
    note(request.node.nodeid, case="checked", exceeded=time.monotonic())
    if kill_survivors(child):
        pytest.fail(f"child {child.pid} still running after {child_timeout(CHILD_S)} s")

@cases
@pytest.mark.faultline_timeout(BUDGET_S)
def test_leftover(i, request, pool_after_children):
    child = start_child()
    child.join(child_timeout(CHILD_S))          # ignored
    note(request.node.nodeid, case="leftover", exceeded=time.monotonic())

@cases
@pytest.mark.faultline_timeout(BUDGET_S)
def test_outer(i, request, pool_naive):
    child = start_child()
    child.join(child_timeout(CHILD_S))          # ignored; teardown closes the pool: blocks
    note(request.node.nodeid, case="outer", exceeded=time.monotonic())

@cases
@pytest.mark.faultline_timeout(BUDGET_S)
def test_unbounded(i, request):
    child = start_child()
    note(request.node.nodeid, case="unbounded", exceeded=time.monotonic() + child_timeout(CHILD_S))
    child.join()
'''

CONFTEST = r'''
import json, os, time
import pytest

RECORD = os.environ["BENCH_RECORD"]

def _note(**kw):
    with open(RECORD, "a") as f:
        f.write(json.dumps(kw) + "\n")

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    _note(test=item.nodeid, start=time.monotonic())
    try:
        return (yield)
    finally:
        _note(test=item.nodeid, ended=time.monotonic())

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if report.failed:
        _note(test=report.nodeid, failed=time.monotonic(), when=report.when)
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--child", type=float, default=1.0, help="the child's base timeout C (s)")
    ap.add_argument("--budget", type=float, default=3.0, help="the test's outer timeout B (s)")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="fl-bench-") as tmp:
        tmp = Path(tmp)
        (tmp / "test_bench.py").write_text(SUITE)
        (tmp / "conftest.py").write_text(CONFTEST)
        (tmp / "pytest.ini").write_text("[pytest]\nfaultline_children_leftovers = fail\n")
        record = tmp / "record.jsonl"
        env = dict(
            os.environ,
            BENCH_CHILD_S=str(args.child),
            BENCH_BUDGET_S=str(args.budget),
            BENCH_RECORD=str(record),
            BENCH_REPEAT=str(args.repeat),
        )
        env.setdefault("FAULTLINE_CHILD_TIMEOUT_SCALE", "1")
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", str(tmp)],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=60 + 4 * args.repeat * (args.budget + 5),
        )  # fmt: skip
        wall = time.monotonic() - started
        rows = {}
        for line in record.read_text().splitlines():
            rec = json.loads(line)
            row = rows.setdefault(rec.pop("test"), {})
            for k, v in rec.items():
                row.setdefault(k, v)  # the first failed report counts

    scale = float(env["FAULTLINE_CHILD_TIMEOUT_SCALE"])
    budget = args.budget * scale
    per_case = {}
    for nodeid, row in rows.items():
        if "case" not in row or "failed" not in row:
            print(f"{nodeid}: did not fail: {row}\n{proc.stdout[-3000:]}", file=sys.stderr)
            return 1
        per_case.setdefault(row["case"], []).append(
            {
                "to_failure_s": row["failed"] - row["exceeded"],
                "to_end_s": row["ended"] - row["exceeded"],
                "failure_after_start_s": row["failed"] - row["start"],
                "phase": row["when"],
            }
        )

    print(f"machine: {platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"child timeout C = {args.child:g} s, outer budget B = {budget:g} s, target: failure within "
          f"B - 10% = {0.9 * budget:g} s of the child exceeding C; {args.repeat} runs per case, session {wall:.1f} s")
    print(f"{'case':<10} {'phase':<9} {'exceeded->failed (median, max)':>32} {'exceeded->ended (max)':>22}  target")
    ok = True
    summary = {}
    for case in ("checked", "leftover", "outer", "unbounded"):
        runs = per_case.get(case, [])
        fail = [r["to_failure_s"] for r in runs]
        end = [r["to_end_s"] for r in runs]
        met = bool(runs) and max(fail) <= 0.9 * budget
        ok = ok and met
        summary[case] = {"runs": runs, "median_to_failure_s": statistics.median(fail), "max_to_failure_s": max(fail)}
        print(
            f"{case:<10} {runs[0]['phase']:<9} {1000 * statistics.median(fail):>14.1f} ms {1000 * max(fail):>12.1f} ms"
            f" {1000 * max(end):>19.1f} ms  {'met' if met else 'MISSED'}"
        )
    # What the outer timeout itself adds: from B's expiry to the failure.
    over = [r["failure_after_start_s"] - budget for c in ("outer", "unbounded") for r in per_case.get(c, [])]
    print(f"outer timeout, expiry -> failure: median {1000 * statistics.median(over):.1f} ms, max {1000 * max(over):.1f} ms")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": platform.node(),
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "child_s": args.child,
                    "budget_s": budget,
                    "cases": summary,
                    "outer_expiry_to_failure_s": over,
                },
                indent=1,
            )
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
