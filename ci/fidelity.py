#!/usr/bin/env python3
"""The fidelity benchmark: does faultline measure a failure at the rate it happens without it?

Runs timing-sensitive programs bare (as a user's shell or CI runner would) and under
`faultline exec`, interleaved round by round in a shuffled order so that every mode sees the same
machine, at equal parallelism (--jobs J runs J bare copies at once against `faultline exec --jobs
J`), and prints each mode's failure rate with its 95% Wilson interval, and whether each harness
mode's failure count differs from the reference's (Fisher's exact test, two-sided, with its p-value).

Where a program's output goes changes how often an exit race crashes (a program that writes at
exit keeps its other threads running for as long as the write takes: an H100 exit race crashed in
51/60 runs through a pipe, 50/60 into /dev/null and 28/60 into a regular file). CTest, pytest
and CI runners read the output through a pipe, so that is the reference:

Modes (--modes, comma-separated; default bare-pipe,bare-null,bare-file,default,amplified):
  bare-pipe   the program alone, stdout and stderr into one pipe that the benchmark drains at
              once, as `prog 2>&1 | cat` does: the reference (--reference)
  bare-null   the program alone, output to /dev/null (`bare` is accepted for it)
  bare-file   the program alone, output to a regular file (truncated per run, `prog >log 2>&1`)
  default     faultline exec (agent preloaded, default crash capture)
  no-preload  faultline exec --no-preload
  inside      faultline exec with the in-process crash report (FAULTLINE_AGENT_CRASH=report,
              what --crash-capture inside selects)
  amplified   faultline exec --faults 'exit/end=delay(100ms)' (the exit-race amplifier; never
              judged: it exists to change the rate)
  no-cores    faultline exec --crash-capture none (no core dumps)
  keeper      faultline exec with a keeper process per run (FAULTLINE_KEEPER=clone), as every run
              had before the cgroup watchdog
Each harness mode but amplified is faithful unless its failure count differs from the
reference's by Fisher's exact test (two-sided, p < 0.05; the p-value is printed): two rates that
are alike are not called different because one falls just outside the other's interval (2/1200
against 5/1200 is p = 0.45). The exit status is 1 when a mode is not faithful. The other bare
modes are shown against the reference in parentheses, for information: they say how much the
destination alone moves the rate here.

  ci/fidelity.py --build build --runs 300 --jobs 1                       # the CPU exit races
  ci/fidelity.py --build build --runs 30 --program 'fl_cuda_exit_race'   # a program of yours
  ci/fidelity.py ... --json out.json                                     # the table as JSON

A program is a command line; a bare name is looked up in BUILD/bin (then in PATH). Every run, bare
or not, starts in the same scratch directory (not where you stand), which --where shapes:
  plain        an empty directory (default)
  elsewhere    the program is run as `sh -c 'cd elsewhere && exec PROG'`: it crashes away from the
               directory faultline started it in (as every run under bisect, in its worktrees)
  core-folder  the directory holds a `core/` folder (a build directory), where the kernel cannot
               write a core named `core`
After each faultline invocation the files named core or core.* left in the scratch directory
(outside faultline's --out) are counted ("stray_cores" in the JSON) and removed. The default programs are the CPU exit races
of harness/testdata/race, some of them writing at exit (--exit-stderr, --exit-printf,
--exit-flood), and one fixed (--drain). Failure = any exit status but 0 (bare; a run past
--timeout is killed and fails) or any outcome but pass (faultline). The JSON has
{"jobs", "reference", "modes", "rows": [{"program", "mode", "jobs", "failures", "runs", "rate",
"lower95", "upper95", "p_value", "faithful", "inside_reference_interval", "crashes",
"named_crashes", "stray_cores"}], "where"} (p_value, faithful and the interval field, kept for
information, are null for the reference and amplified; the crash counts null for bare modes: a crash is
named when its signature holds frames, not the signal alone, i.e. its core was read). Standard
library only.
"""
import argparse
import json
import math
import random
import os
import selectors
import shlex
import subprocess
import sys
import tempfile
import time

DEFAULT_PROGRAMS = [
    "fl_race_static_dtor",
    "fl_race_atexit",
    "fl_race_shlib_dtor",
    "fl_race_static_dtor --exit-stderr",  # the destructor's log line, as the H100 program's
    "fl_race_static_dtor --exit-printf",  # a last line that exit() flushes inside the window
    "fl_race_atexit --exit-flood",        # 1 MiB at exit: the reader must drain as it comes
    "fl_race_static_dtor --drain",        # fixed: never fails
]
AMPLIFIER = "exit/end=delay(100ms)"
BARE_MODES = ("bare-pipe", "bare-null", "bare-file")
HARNESS_EXTRAS = {"default": [], "no-preload": ["--no-preload"],
                  "inside": ["--env", "FAULTLINE_AGENT_CRASH=report"],
                  "amplified": ["--faults", AMPLIFIER], "no-cores": ["--crash-capture", "none"],
                  "keeper": []}
# Modes that differ in faultline's environment: `keeper` is containment with a keeper process per
# run (cloned from the harness), what every run had before the watchdog.
HARNESS_ENV = {"keeper": {"FAULTLINE_KEEPER": "clone"}}
ALIASES = {"bare": "bare-null"}  # what `bare` meant before the destinations were told apart


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


def fisher_two_sided(k1, n1, k2, n2):
    """Fisher's exact test of k1/n1 against k2/n2, two-sided: the probability, with the margins
    fixed, of a table no more likely than the one seen (exact integer arithmetic)."""
    total = k1 + k2
    lo, hi = max(0, total - n2), min(total, n1)
    seen = math.comb(n1, k1) * math.comb(n2, k2)
    extreme = sum(w for w in (math.comb(n1, x) * math.comb(n2, total - x) for x in range(lo, hi + 1)) if w <= seen)
    return min(1.0, extreme / math.comb(n1 + n2, total))


FAITHFUL_ALPHA = 0.05


def resolve(build, program):
    """The program's argv, argv[0] made absolute (the runs start in a scratch directory)."""
    argv = shlex.split(program)
    if "/" in argv[0]:
        argv[0] = os.path.abspath(argv[0])
    elif os.path.exists(os.path.join(build, "bin", argv[0])):
        argv[0] = os.path.abspath(os.path.join(build, "bin", argv[0]))
    return argv


def drain(pipes, deadline):
    """Reads every pipe to its end (or until the deadline) as the data comes, like one `cat` each:
    a program never waits on a full pipe. The data is dropped."""
    with selectors.DefaultSelector() as sel:
        for f in pipes:
            sel.register(f, selectors.EVENT_READ)
        while sel.get_map() and time.monotonic() < deadline:
            for key, _ in sel.select(timeout=max(0.0, deadline - time.monotonic())):
                if not os.read(key.fd, 1 << 16):
                    sel.unregister(key.fileobj)


def run_bare(argv, jobs, timeout, mode, workdir, cwd):
    """J copies at once, output where `mode` says; returns (failures, runs)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAULTLINE_")}
    procs = []
    for i in range(jobs):
        if mode == "bare-pipe":
            out = subprocess.PIPE
        elif mode == "bare-null":
            out = subprocess.DEVNULL
        else:  # bare-file: `prog >log 2>&1`, one file per copy, truncated per run
            out = open(os.path.join(workdir, f"bare-file.{i}.log"), "wb")
        procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd))
        if mode == "bare-file":
            out.close()  # the child holds it now
    deadline = time.monotonic() + timeout
    if mode == "bare-pipe":
        drain([p.stdout for p in procs], deadline)
    failures = 0
    for p in procs:
        try:
            rc = p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        if p.stdout is not None:
            p.stdout.close()
        failures += rc != 0
    return failures, jobs


def run_faultline(faultline, argv, jobs, timeout, seed, extra, workdir, cwd, env=None):
    out = os.path.join(workdir, "out")
    cmd = [faultline, "exec", "--repeat", str(jobs), "--jobs", str(jobs), "--seed", str(seed),
           "--timeout", f"{timeout}s", "--out", out, "--replace", "--json"] + extra + ["--"] + argv
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=cwd,
                       env=dict(os.environ, **env) if env else None)
    if r.returncode not in (0, 1):
        sys.exit(f"fidelity: faultline failed ({r.returncode}): {shlex.join(cmd)}")
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    runs = summary["runs"]
    return runs - summary["outcomes"].get("pass", 0), runs, crash_names(summary)


def stray_cores(cwd):
    """Removes and counts the core files faultline's runs left under `cwd` (its --out is elsewhere)."""
    n = 0
    for root, _, files in os.walk(cwd):
        for f in files:
            if f == "core" or f.startswith("core."):
                os.remove(os.path.join(root, f))
                n += 1
    return n


def wrap(argv, where):
    """The command line as --where runs it."""
    if where == "elsewhere":
        return ["/bin/sh", "-c", "cd elsewhere && exec \"$@\"", "sh"] + argv
    return argv


def crash_names(summary):
    """(crashes, crashes whose signature names frames): a signature of the signal alone
    ("SIGABRT") means the crash's stack could not be read (its core was lost)."""
    crashes = named = 0
    for s in summary.get("signatures", []):
        if s.get("outcome") != "crash":
            continue
        crashes += s["count"]
        named += s["count"] if ": " in s["signature"] else 0
    return crashes, named


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--build", default="build", help="build directory (faultline in BUILD/bin)")
    ap.add_argument("--runs", type=int, default=100, help="runs per program and mode")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once, bare and under faultline")
    ap.add_argument("--program", action="append", help="command line to measure (repeatable)")
    ap.add_argument("--modes", default="bare-pipe,bare-null,bare-file,default,amplified",
                    help="comma-separated: " + ", ".join(BARE_MODES + tuple(HARNESS_EXTRAS)) + " (bare = bare-null)")
    ap.add_argument("--reference", default="bare-pipe", choices=BARE_MODES,
                    help="the bare mode whose interval the harness modes are judged by")
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run")
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("--where", default="plain", choices=("plain", "elsewhere", "core-folder"),
                    help="where the program stands when it crashes (see below)")
    a = ap.parse_args()
    if a.runs < 1 or a.jobs < 1:
        ap.error("--runs and --jobs must be at least 1")
    modes = []
    for m in a.modes.split(","):
        m = ALIASES.get(m.strip(), m.strip())
        if m and m not in modes:
            modes.append(m)
    known = set(BARE_MODES) | set(HARNESS_EXTRAS)
    if not modes or set(modes) - known:
        ap.error(f"--modes: expected some of {', '.join(sorted(known | set(ALIASES)))}")
    if a.reference not in modes:
        print(f"fidelity: {a.reference} (the reference) is not measured: no verdicts", file=sys.stderr)
    faultline = os.path.abspath(os.path.join(a.build, "bin", "faultline"))
    if not os.access(faultline, os.X_OK):
        ap.error(f"{faultline} not found: build first (bash ci/setup.sh)")

    rows = []
    with tempfile.TemporaryDirectory(prefix="faultline-fidelity-") as work:
        # Every run starts here: a `core` folder where the benchmark was started (the source tree
        # has one) would turn faultline's default crash capture off.
        cwd = os.path.join(work, "cwd")
        os.mkdir(cwd)
        os.mkdir(os.path.join(cwd, "elsewhere"))
        if a.where == "core-folder":
            os.mkdir(os.path.join(cwd, "core"))
        for program in a.program or DEFAULT_PROGRAMS:
            argv = wrap(resolve(a.build, program), a.where)
            counts = {m: [0, 0] for m in modes}
            names = {m: [0, 0] for m in modes}  # harness modes: crashes, crashes named by frames
            strays = {m: 0 for m in modes}
            started = time.time()
            rounds = (a.runs + a.jobs - 1) // a.jobs
            order = list(modes)
            shuffle = random.Random(1)
            for r in range(rounds):  # interleaved: every mode once per round, in a shuffled order
                shuffle.shuffle(order)
                for m in order:
                    if m in BARE_MODES:
                        k, n = run_bare(argv, a.jobs, a.timeout, m, work, cwd)
                    else:
                        stray_cores(cwd)  # a bare run's (with `ulimit -c` above 0): not faultline's
                        k, n, (c, named) = run_faultline(faultline, argv, a.jobs, a.timeout, r + 1, HARNESS_EXTRAS[m],
                                                         work, cwd, HARNESS_ENV.get(m))
                        names[m][0] += c
                        names[m][1] += named
                        strays[m] += stray_cores(cwd)
                    counts[m][0] += k
                    counts[m][1] += n
                if sys.stderr.isatty():
                    print(f"\r{program}: round {r + 1}/{rounds}", end="", file=sys.stderr, flush=True)
            print(f"\r{program}: {rounds} rounds in {time.time() - started:.0f} s" + " " * 20, file=sys.stderr)
            ref = counts.get(a.reference)
            ref_ci = wilson(*ref) if ref else None
            for m in modes:
                k, n = counts[m]
                lo, hi = wilson(k, n)
                judged = ref is not None and m not in (a.reference, "amplified")
                inside = (ref_ci[0] <= k / n <= ref_ci[1]) if judged else None
                p = fisher_two_sided(k, n, *ref) if judged else None
                rows.append({"program": program, "mode": m, "jobs": a.jobs, "failures": k, "runs": n,
                             "rate": k / n, "lower95": lo, "upper95": hi, "p_value": p,
                             "faithful": (p >= FAITHFUL_ALPHA) if judged else None,
                             "inside_reference_interval": inside,
                             "crashes": names[m][0] if m not in BARE_MODES else None,
                             "named_crashes": names[m][1] if m not in BARE_MODES else None,
                             "stray_cores": strays[m] if m not in BARE_MODES else None})

    w = max([len("program")] + [len(r["program"]) for r in rows])
    print(f"\n{'program':{w}} {'mode':11} {'failures':>10} {'rate':>7}   95% CI           p (vs {a.reference})"
          "  faithful   crashes named by frames")
    for row in rows:
        verdict = {None: "", True: "yes", False: "NO"}[row["faithful"]]
        if verdict and row["mode"] in BARE_MODES:
            verdict = {"yes": "(alike)", "NO": "(differs)"}[verdict]  # information, not a verdict
        p = "" if row["p_value"] is None else f"{row['p_value']:.3g}"
        print(f"{row['program']:{w}} {row['mode']:11} {row['failures']:>4}/{row['runs']:<5} "
              f"{100 * row['rate']:6.1f}%   {100 * row['lower95']:5.1f}% - {100 * row['upper95']:5.1f}%   {p:>14}"
              f"  {verdict:9}" + (f"   {row['named_crashes']}/{row['crashes']}" if row["crashes"] else "")
              + (f"   {row['stray_cores']} cores left outside --out" if row["stray_cores"] else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"jobs": a.jobs, "reference": a.reference, "modes": modes, "where": a.where, "rows": rows}, f, indent=1)
    unfaithful = [r for r in rows if r["mode"] not in BARE_MODES and r["faithful"] is False]
    return 1 if unfaithful else 0


if __name__ == "__main__":
    sys.exit(main())
