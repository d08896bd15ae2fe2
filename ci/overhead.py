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

Where the time goes, in one command that writes its tables to a folder (records/overhead/):
  ci/overhead.py --build build --breakdown OUTDIR [--scaling 1,2,4,8,16] [--runs 2000 --rounds 5]
runs BUILD/bin/run_cost_bench (each step of a run timed on its own, run_once with its steps at
1 thread and at every core, a campaign at --jobs 1 and --jobs = cores), then the loop and
faultline arms at each --jobs of --scaling (default: 1 and the cores), and writes
OUTDIR/run_cost_bench.json, OUTDIR/overhead-jJ.json and OUTDIR/breakdown.md (the tables).

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
    ap.add_argument("--breakdown", metavar="OUTDIR",
                    help="the breakdown: run_cost_bench, then the arms at each --scaling parallelism; tables in OUTDIR")
    ap.add_argument("--scaling", help="with --breakdown: comma-separated --jobs values (default: 1 and the cores)")
    ap.add_argument("--bench-min-time", default="0.3", help="with --breakdown: run_cost_bench's --benchmark_min_time (s)")
    a = ap.parse_args()
    if a.runs < 1 or a.rounds < 1 or a.jobs < 1:
        ap.error("--runs, --rounds and --jobs must be at least 1")
    scaling = [a.jobs]
    if a.breakdown:
        try:
            scaling = [int(x) for x in (a.scaling or f"1,{os.cpu_count()}").split(",")]
        except ValueError:
            ap.error("--scaling: expected comma-separated numbers")
        scaling = sorted(set(j for j in scaling if j >= 1))
    for j in scaling:
        if a.runs % j:
            ap.error(f"--runs must be a multiple of --jobs {j} (each of the J loops runs runs/J times)")
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
    if not a.breakdown:
        measure(a, arms, variants, program, faultline)
        return 0
    os.makedirs(a.breakdown, exist_ok=True)
    bench = breakdown_bench(a)
    results = []
    for j in scaling:
        a.jobs = j
        a.json = os.path.join(a.breakdown, f"overhead-j{j}.json")
        results.append(measure(a, arms, variants, program, faultline))
    write_breakdown(a, bench, results)
    return 0


def breakdown_bench(a):
    """run_cost_bench's figures (its JSON), also kept in OUTDIR/run_cost_bench.json."""
    exe = os.path.join(a.build, "bin", "run_cost_bench")
    if not os.access(exe, os.X_OK):
        sys.exit(f"overhead: {exe} not found: build the run_cost_bench target")
    out = os.path.join(a.breakdown, "run_cost_bench.json")
    r = subprocess.run([exe, f"--benchmark_min_time={a.bench_min_time}", "--benchmark_format=console",
                        f"--benchmark_out={out}", "--benchmark_out_format=json"], stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.exit(f"overhead: {exe} exited {r.returncode}")
    with open(out) as f:
        return json.load(f)


STEPS = ["prepare", "arm", "spawn", "program", "end", "cores", "reap", "output", "judge"]


def write_breakdown(a, bench, results):
    """OUTDIR/breakdown.md: the steps of a run, each cost on its own, and the arms at each --jobs."""
    by_name = {b["name"]: b for b in bench["benchmarks"] if b.get("run_type", "iteration") == "iteration"}
    ctx = bench.get("context", {})
    lines = [f"# Where a run's time goes ({ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs, "
             f"{ctx.get('date', '')}; load average before: {os.getloadavg()[0]:.2f})", ""]
    lines += ["## run_once of the no-op, step by step (us a run; run_report::steps)", "",
              "| step | " + " | ".join(n for n in by_name if n.startswith("run/")) + " |",
              "|---|" + "---:|" * sum(1 for n in by_name if n.startswith("run/"))]
    runs = [by_name[n] for n in by_name if n.startswith("run/")]
    for step in STEPS + ["run_once"]:
        lines.append(f"| {step} | " + " | ".join(f"{b.get(step + '_us', 0):.1f}" for b in runs) + " |")
    lines += ["", "## Each cost on its own (us an iteration, wall clock)", "", "| what | us |", "|---|---:|"]
    for n, b in by_name.items():
        if n.startswith("run/") or n.startswith("campaign/"):
            continue
        lines.append(f"| {n} | {b['real_time']:.2f} |")
    lines += ["", "## A campaign of the no-op (run_campaign, its results file and all)", "",
              "| campaign | us a run |", "|---|---:|"]
    for n, b in by_name.items():
        if n.startswith("campaign/"):
            lines.append(f"| {n} (jobs/runs) | {b.get('us_per_run', 0):.1f} |")
    lines += ["", f"## Whole processes: faultline exec against shell loops ({a.runs} runs x {a.rounds} rounds, medians)", "",
              "| --jobs | arm | ms a run | IQR | over the loop | throughput vs loops |", "|---:|---|---:|---|---:|---:|"]
    for res in results:
        for row in res["rows"]:
            over = "" if row["overhead_ms"] is None else f"{row['overhead_ms']:+.3f} ms"
            thr = "" if row["throughput_vs_loop"] is None else f"{row['throughput_vs_loop']:.2f}x"
            lines.append(f"| {res['jobs']} | {row['arm']} | {row['ms_per_run']:.3f} | {row['q1']:.3f}-{row['q3']:.3f} | {over} | {thr} |")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.breakdown, "breakdown.md"), "w") as f:
        f.write(text)
    print(text)


def measure(a, arms, variants, program, faultline):
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
    return {"jobs": a.jobs, "rows": rows}


if __name__ == "__main__":
    sys.exit(main())
