#!/usr/bin/env python3
"""The overhead benchmark: what one run under `faultline exec` costs beside the program itself.

Three ways to run the same no-op program N times with J at once, interleaved round by round
(every arm once per round, in a shuffled order) so that all of them see the same machine:
  loop      J shell loops, each running the program N/J times (`for i in ...; do prog; done`)
  ctest     `ctest --repeat until-fail:N/J -j J` over J tests that each run the program
  faultline `faultline exec --repeat N --jobs J -- prog` (default options: containment, the
            agent preloaded, output through a pipe, crash capture)
and prints, for each arm, the wall time per run (the median round, and the interquartile range
of the rounds), the overhead per run against the shell loop, and the throughput as a fraction of
the loop's. Targets (issue 16): faultline's overhead <= 0.5 ms per run at --jobs 1, and at
--jobs = cores a throughput >= 0.8x the loops'.

  ci/overhead.py --build build --runs 2000 --rounds 5 --jobs 1
  ci/overhead.py --build build --runs 2000 --rounds 5 --jobs 2 --json records/overhead/cpu2-j2.json

The program is BUILD/bin/fl_testdata_noop when it exists (main returns 0), else /bin/true.
Extra faultline options go after `--faultline-args` (e.g. `--faultline-args=--no-preload`).
`--variant NAME=WORDS` adds a faultline arm of its own, interleaved with the others: WORDS are
`bin=PATH` (another faultline binary, e.g. the previous commit's) and K=V environment settings,
e.g. `--variant base=bin=/tmp/base/build/bin/faultline --variant cloned=FAULTLINE_KEEPER=clone`.
Standard library only.
"""
import argparse
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, env=None, cwd=None):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"overhead: {shlex.join(cmd)} exited {r.returncode}: {r.stderr.decode(errors='replace')[-2000:]}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build", default="build", help="build directory (faultline in BUILD/bin)")
    ap.add_argument("--runs", type=int, default=2000, help="runs of the program per arm and round")
    ap.add_argument("--rounds", type=int, default=5, help="rounds (each arm once per round)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once in every arm")
    ap.add_argument("--program", help="the no-op program (default: BUILD/bin/fl_testdata_noop, else /bin/true)")
    ap.add_argument("--arms", default="loop,ctest,faultline", help="comma-separated: loop, ctest, faultline")
    ap.add_argument("--faultline-args", default="", help="extra options for faultline exec (shell words)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=WORDS",
                    help="another faultline arm: bin=PATH and/or K=V environment settings (repeatable)")
    ap.add_argument("--label", default="", help="a name for this measurement in the JSON (machine, options)")
    ap.add_argument("--json", help="write the figures as JSON here")
    a = ap.parse_args()
    if a.runs < 1 or a.rounds < 1 or a.jobs < 1:
        ap.error("--runs, --rounds and --jobs must be at least 1")
    if a.runs % a.jobs:
        ap.error("--runs must be a multiple of --jobs (each of the J loops runs runs/J times)")
    arms = [x.strip() for x in a.arms.split(",") if x.strip()]
    if not arms or set(arms) - {"loop", "ctest", "faultline"}:
        ap.error("--arms: expected some of loop, ctest, faultline")
    variants = {}
    for v in a.variant:
        name, eq, words = v.partition("=")
        if not eq or not name or name in ("loop", "ctest", "faultline") or name in variants:
            ap.error(f"--variant {v!r}: expected a new NAME=WORDS")
        spec = {"bin": None, "env": {}}
        for w in shlex.split(words):
            k, eq2, val = w.partition("=")
            if not eq2 or not k:
                ap.error(f"--variant {v!r}: {w!r} is not bin=PATH or K=V")
            if k == "bin":
                if not os.access(val, os.X_OK):
                    ap.error(f"--variant {v!r}: {val} is not an executable")
                spec["bin"] = os.path.abspath(val)
            else:
                spec["env"][k] = val
        variants[name] = spec
        arms.append(name)
    faultline = os.path.join(a.build, "bin", "faultline")
    if "faultline" in arms and not os.access(faultline, os.X_OK):
        ap.error(f"{faultline} not found: build first (bash ci/setup.sh)")
    if "ctest" in arms and not shutil.which("ctest"):
        ap.error("ctest is not on PATH")
    program = a.program
    if not program:
        noop = os.path.abspath(os.path.join(a.build, "bin", "fl_testdata_noop"))
        program = noop if os.access(noop, os.X_OK) else "/bin/true"
    program = os.path.abspath(program) if os.path.exists(program) else program
    per_loop = a.runs // a.jobs
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}

    with tempfile.TemporaryDirectory(prefix="faultline-overhead-") as work:
        # A CTest tree needs no project: a CTestTestfile.cmake with J tests of the program.
        ctest_dir = os.path.join(work, "ctest")
        os.makedirs(ctest_dir)
        with open(os.path.join(ctest_dir, "CTestTestfile.cmake"), "w") as f:
            for j in range(a.jobs):
                f.write(f'add_test(noop{j} "{program}")\n')
        # J loops at once; `wait` collects them all, and a failed run leaves a mark behind.
        loop = ("p=$1; n=$2; j=$3; mark=$4; i=0; while [ $i -lt $j ]; do "
                "(k=0; while [ $k -lt $n ]; do \"$p\" || { : >\"$mark\"; exit 1; }; k=$((k+1)); done) & i=$((i+1)); done; "
                "wait; [ ! -e \"$mark\" ]")
        commands = {
            "loop": (["sh", "-c", loop, "loop", program, str(per_loop), str(a.jobs), os.path.join(work, "loop-failed")], None),
            "ctest": (["ctest", "--repeat", f"until-fail:{per_loop}", "-j", str(a.jobs), "-Q"], ctest_dir),
            "faultline": ([os.path.abspath(faultline), "exec", "--repeat", str(a.runs), "--jobs", str(a.jobs), "--seed", "1",
                           "--out", os.path.join(work, "fl-out"), "--replace"] + shlex.split(a.faultline_args) + ["--", program], None),
        }
        for name, spec in variants.items():
            cmd = list(commands["faultline"][0])
            cmd[0] = spec["bin"] or cmd[0]
            cmd[cmd.index(os.path.join(work, "fl-out"))] = os.path.join(work, "fl-out-" + name)
            commands[name] = (cmd, None)
        times = {arm: [] for arm in arms}
        order = list(arms)
        shuffle = random.Random(1)
        for r in range(a.rounds):
            shuffle.shuffle(order)
            for arm in order:
                cmd, cwd = commands[arm]
                run_env = env
                if arm == "faultline":
                    shutil.rmtree(os.path.join(work, "fl-out"), ignore_errors=True)
                elif arm in variants:
                    shutil.rmtree(os.path.join(work, "fl-out-" + arm), ignore_errors=True)
                    run_env = dict(env, **variants[arm]["env"])
                times[arm].append(timed(cmd, env=run_env, cwd=cwd))
            print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{arm} {1e3 * times[arm][-1] / a.runs:.3f} ms/run" for arm in arms),
                  file=sys.stderr)

    def per_run_ms(arm):
        xs = sorted(1e3 * t / a.runs for t in times[arm])
        q = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0], xs[0], xs[0]]
        return statistics.median(xs), q[0], q[2]

    rows = []
    base = per_run_ms("loop")[0] if "loop" in arms else None
    for arm in arms:
        med, q1, q3 = per_run_ms(arm)
        rows.append({"arm": arm, "ms_per_run": med, "q1": q1, "q3": q3,
                     "overhead_ms": None if base is None else med - base,
                     "throughput_vs_loop": None if base is None else base / med})
    print(f"\nprogram {program}, {a.runs} runs x {a.rounds} rounds, --jobs {a.jobs}")
    print(f"{'arm':12} {'ms/run':>8} {'IQR':>17} {'overhead':>10} {'throughput':>11}")
    for row in rows:
        over = "" if row["overhead_ms"] is None else f"{row['overhead_ms']:+.3f} ms"
        thr = "" if row["throughput_vs_loop"] is None else f"{row['throughput_vs_loop']:.2f}x"
        print(f"{row['arm']:12} {row['ms_per_run']:8.3f} {row['q1']:8.3f}-{row['q3']:<8.3f} {over:>10} {thr:>11}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"label": a.label, "program": program, "runs": a.runs, "rounds": a.rounds, "jobs": a.jobs,
                       "faultline_args": a.faultline_args, "cores": os.cpu_count(), "rows": rows,
                       "variants": variants,
                       "seconds": {arm: times[arm] for arm in arms}}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
