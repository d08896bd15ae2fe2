#!/usr/bin/env python3
"""The fidelity benchmark: does faultline measure a failure at the rate it happens without it?

Runs timing-sensitive programs bare (as a shell would) and under `faultline exec`, interleaved
round by round so that both see the same machine, at equal parallelism (--jobs J runs J bare
copies at once against `faultline exec --jobs J`), and prints each mode's failure rate with its
95% Wilson interval, and whether the harness's rate lies inside the bare rate's interval.

Modes (--modes, comma-separated):
  bare        the program alone, J copies at once
  default     faultline exec (agent preloaded, default crash capture)
  no-preload  faultline exec --no-preload
  inside      faultline exec with the in-process crash report (FAULTLINE_AGENT_CRASH=report,
              what --crash-capture inside selects)
  amplified   faultline exec --faults 'exit/end=delay(100ms)' (the exit-race amplifier)
  no-cores    faultline exec --crash-capture none (no core dumps)

  ci/fidelity.py --build build --runs 300 --jobs 1                       # the CPU exit races
  ci/fidelity.py --build build --runs 30 --program 'fl_cuda_exit_race'   # a program of yours
  ci/fidelity.py ... --json out.json                                     # the table as JSON

A program is a command line; a bare name is looked up in BUILD/bin. Failure = any exit status
but 0 (bare) or any outcome but pass (faultline). Standard library only.
"""
import argparse
import json
import math
import random
import os
import shlex
import subprocess
import sys
import tempfile
import time

DEFAULT_PROGRAMS = [
    "fl_race_static_dtor",
    "fl_race_atexit",
    "fl_race_shlib_dtor",
    "fl_race_static_dtor --drain",
]
AMPLIFIER = "exit/end=delay(100ms)"


def wilson(k, n, z=1.959963984540054):
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = p + z * z / (2 * n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    lo, hi = (c - h) / d, (c + h) / d
    if k == 0:
        lo, hi = 0.0, 1 - 0.05 ** (1 / n)  # the exact one-sided bound, as faultline reports it
    elif k == n:
        hi = 1.0
    return (max(0.0, lo), min(1.0, hi))


def resolve(build, program):
    argv = shlex.split(program)
    if "/" not in argv[0]:
        candidate = os.path.join(build, "bin", argv[0])
        if os.path.exists(candidate):
            argv[0] = candidate
    return argv


def run_bare(argv, jobs, timeout):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    procs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
             for _ in range(jobs)]
    failures = 0
    for p in procs:
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        failures += rc != 0
    return failures, jobs


def run_faultline(faultline, argv, jobs, timeout, seed, extra, workdir):
    out = os.path.join(workdir, "out")
    cmd = [faultline, "exec", "--repeat", str(jobs), "--jobs", str(jobs), "--seed", str(seed),
           "--timeout", f"{timeout}s", "--out", out, "--json"] + extra + ["--"] + argv
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if r.returncode not in (0, 1):
        sys.exit(f"fidelity: faultline failed ({r.returncode}): {shlex.join(cmd)}")
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    runs = summary["runs"]
    return runs - summary["outcomes"].get("pass", 0), runs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build", default="build", help="build directory (faultline in BUILD/bin)")
    ap.add_argument("--runs", type=int, default=100, help="runs per program and mode")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, bare and under faultline")
    ap.add_argument("--program", action="append", help="command line to measure (repeatable)")
    ap.add_argument("--modes", default="bare,default,amplified",
                    help="comma-separated: bare, default, no-preload, inside, amplified, no-cores")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run")
    ap.add_argument("--json", help="write the table as JSON here")
    a = ap.parse_args()
    if a.runs < 1 or a.jobs < 1:
        ap.error("--runs and --jobs must be at least 1")
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    known = {"bare", "default", "no-preload", "inside", "amplified", "no-cores"}
    if not modes or set(modes) - known:
        ap.error(f"--modes: expected some of {', '.join(sorted(known))}")
    faultline = os.path.join(a.build, "bin", "faultline")
    if not os.access(faultline, os.X_OK):
        ap.error(f"{faultline} not found: build first (bash ci/setup.sh)")
    extras = {"default": [], "no-preload": ["--no-preload"], "inside": ["--env", "FAULTLINE_AGENT_CRASH=report"],
              "amplified": ["--faults", AMPLIFIER], "no-cores": ["--crash-capture", "none"]}

    rows = []
    with tempfile.TemporaryDirectory(prefix="faultline-fidelity-") as work:
        for program in a.program or DEFAULT_PROGRAMS:
            argv = resolve(a.build, program)
            counts = {m: [0, 0] for m in modes}
            started = time.time()
            rounds = (a.runs + a.jobs - 1) // a.jobs
            order = list(modes)
            shuffle = random.Random(1)
            for r in range(rounds):  # interleaved: every mode once per round, in a shuffled order
                shuffle.shuffle(order)
                for m in order:
                    if m == "bare":
                        k, n = run_bare(argv, a.jobs, a.timeout)
                    else:
                        k, n = run_faultline(faultline, argv, a.jobs, a.timeout, r + 1, extras[m], work)
                    counts[m][0] += k
                    counts[m][1] += n
                if sys.stderr.isatty():
                    print(f"\r{program}: round {r + 1}/{rounds}", end="", file=sys.stderr, flush=True)
            print(f"\r{program}: {rounds} rounds in {time.time() - started:.0f} s" + " " * 20, file=sys.stderr)
            bare_ci = wilson(*counts["bare"]) if "bare" in counts else None
            for m in modes:
                k, n = counts[m]
                lo, hi = wilson(k, n)
                inside = None if bare_ci is None or m in ("bare", "amplified") else (bare_ci[0] <= k / n <= bare_ci[1])
                rows.append({"program": program, "mode": m, "jobs": a.jobs, "failures": k, "runs": n,
                             "rate": k / n, "lower95": lo, "upper95": hi, "inside_bare_interval": inside})

    print(f"\n{'program':34} {'mode':11} {'failures':>10} {'rate':>7}   95% CI           faithful")
    for row in rows:
        verdict = {None: "", True: "yes", False: "NO"}[row["inside_bare_interval"]]
        print(f"{row['program'][:34]:34} {row['mode']:11} {row['failures']:>4}/{row['runs']:<5} "
              f"{100 * row['rate']:6.1f}%   {100 * row['lower95']:5.1f}% - {100 * row['upper95']:5.1f}%   {verdict}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"jobs": a.jobs, "rows": rows}, f, indent=1)
    return 1 if any(r["inside_bare_interval"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
