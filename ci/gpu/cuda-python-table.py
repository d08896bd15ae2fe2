#!/usr/bin/env python3
"""The verdict table of ci/gpu/cuda-python-seed.sh (issue 40) from its OUT folder.

    ci/gpu/cuda-python-table.py [--timeout DUR] OUT        Markdown on stdout

Reads each campaign OUT/campaigns/TREE-SPEC/results.jsonl and judges it against the issue:
  - no fault ("none"): every run passes;
  - a fault on the pre tree (caf05e6): the session is reported as a hang, or as a failure in
    which a point acted on a child, in at least 95% of at least 20 runs;
  - a fault on the post tree (ae34e4c): a clean failure in every run: outcome fail (not hang),
    no process left behind, within the outer timeout.
Then, per campaign, the stacks of the first hung run (every process: where the parent waits,
where the child is). Standard library only.
"""
import json
import re
import statistics
import sys
from pathlib import Path

SPECS = ["none", "start-stop", "start-delay", "import-stop", "import-kill", "driver-start-stop"]
TREES = ["pre", "post"]
CAUGHT_RATE = 0.95
MIN_RUNS = 20
STACK_FRAMES = 12


def seconds(duration: str) -> float:
    m = re.fullmatch(r"(\d+)(ms|s|m)", duration)
    if not m:
        raise ValueError(f"not a duration: {duration!r}")
    return int(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def load(folder: Path):
    results = folder / "results.jsonl"
    if not results.is_file():
        return None
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


SUMMARY = re.compile(r"^=*\s*((?:\d+ \w+(?:, )?)+) in [0-9.]+s")


def pytest_summary(folder: Path, run) -> dict:
    """The counts of pytest's last summary line in the run's log ({"failed": 1, "passed": 2}),
    empty when the session printed none (it never ran its tests, or was ended first)."""
    log = folder / run["log"] if run.get("log") else None
    if log is None or not log.is_file():
        return {}
    counts = {}
    for line in log.read_text(errors="replace").splitlines():
        m = SUMMARY.match(line.strip())
        if m:
            counts = {}
            for part in m.group(1).split(", "):
                n, word = part.split(" ", 1)
                counts[word.rstrip("s") if word in ("errors", "warnings") else word] = int(n)
    return counts


def left_behind(run) -> bool:
    return bool(run.get("leaked_pids")) or run.get("outcome") == "leak"


def judge(tree: str, spec: str, folder: Path, runs, timeout_s: float):
    """(verdict text, whether it meets the issue's requirement). A run counts only when its
    session ran the tests (pytest printed its summary) or hung; an exit before that (a missing
    module, a refused option) is never a catch nor a clean failure."""
    n = len(runs)
    summaries = [pytest_summary(folder, r) for r in runs]
    if spec == "none":
        ok = all(r["outcome"] == "pass" and (s.get("passed") or s.get("skipped")) and not s.get("failed")
                 for r, s in zip(runs, summaries))
        return ("green" if ok else "NOT green"), ok
    if tree == "pre":
        # A hang, or a failed test in a session where a point acted (through the driver the
        # points act in the tests' processes, which its report names, not under exec's spec).
        driver = spec.startswith("driver-")
        caught = sum(1 for r, s in zip(runs, summaries) if r["outcome"] == "hang"
                     or (r["outcome"] == "fail" and s.get("failed") and (r.get("points_reached") or driver)))
        # The driver's row checks the way in (the same points from outside), not the rate.
        ok = (n >= MIN_RUNS or driver) and caught >= CAUGHT_RATE * n
        return f"caught {caught}/{n} ({100.0 * caught / n:.0f}%)", ok
    clean = sum(1 for r, s in zip(runs, summaries) if r["outcome"] == "fail" and s.get("failed")
                and not left_behind(r) and r.get("duration_ms", 0) < timeout_s * 1000)
    ok = clean == n
    return f"clean failure {clean}/{n}", ok


def session_summary(folder: Path, runs) -> str:
    """The runs' pytest summaries, most frequent first ("1 failed x19; 1 passed x1")."""
    counts = {}
    for r in runs:
        s = pytest_summary(folder, r)
        key = ", ".join(f"{v} {k}" for k, v in s.items() if k not in ("warning", "warnings")) or "none printed"
        counts[key] = counts.get(key, 0) + 1
    return "; ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def outcomes(runs) -> str:
    counts = {}
    for r in runs:
        key = r["outcome"] + (f"/{r['phase']}" if r.get("phase") else "")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def first_signature(runs) -> str:
    for r in runs:
        if r.get("signature"):
            return r["signature"].replace("|", "\\|")
    return "-"


def stack_excerpt(text: str) -> list:
    """Each process of a stacks file by its header; its Python frames where py-spy read them,
    else its first thread's first native frames (a stopped process: where it is parked)."""
    sections, current = [], None
    for line in text.splitlines():
        if line.startswith("=== process "):
            current = [line]
            sections.append(current)
        elif current is not None:
            current.append(line)
    python = {s[0].split(" via ")[0] for s in sections if s[0].endswith("via py-spy ===")}
    out = []
    for s in sections:
        head = s[0].split(" via ")[0]
        if s[0].endswith("via py-spy ==="):
            out += s[:1] + [l for l in s[1:] if l.strip()][:STACK_FRAMES * 2]
        elif head not in python or " state T " in s[0]:
            first, tids = [], 0
            for l in s[1:]:
                tids += l.startswith("TID ")
                if tids > 1:
                    break
                first.append(l)
            out += s[:1] + first[:STACK_FRAMES + 2]
    return out


def stacks_of(folder: Path, runs) -> str:
    for r in runs:
        if r["outcome"] != "hang":
            continue
        path = r.get("stacks")
        candidates = [folder / path] if path else []
        candidates += sorted((folder / "runs" / r["run_id"]).glob("stacks*")) if r.get("run_id") else []
        for c in candidates:
            if c.is_file():
                lines = stack_excerpt(c.read_text(errors="replace"))
                return f"run {r['run_id']} ({c.relative_to(folder.parent)}, excerpt):\n" + "\n".join(lines)
    return ""


def table(out: Path, timeout_s: float) -> str:
    camp = out / "campaigns"
    lines = ["| tree | spec | faults | runs | outcomes | pytest summaries | points reached | left behind | median s | verdict | meets | signature |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    stacks = []
    failed = []
    for spec in SPECS:
        for tree in TREES:
            runs = load(camp / f"{tree}-{spec}")
            if runs is None:
                continue
            if not runs:
                lines.append(f"| {tree} | {spec} | | 0 | no runs recorded | | | | | | no | |")
                failed.append(f"{tree} {spec}")
                continue
            folder = camp / f"{tree}-{spec}"
            verdict, ok = judge(tree, spec, folder, runs, timeout_s)
            if not ok:
                failed.append(f"{tree} {spec}: {verdict}")
            faults = (runs[0].get("faults") or "").replace("|", "\\|")
            if spec.startswith("driver-"):
                faults = "driver: " + next((a.split("=", 1)[1] for a in runs[0].get("command", [])
                                            if a.startswith("--faultline-faults=")), "")
            reached = sum(1 for r in runs if r.get("points_reached"))
            behind = sum(1 for r in runs if left_behind(r))
            median = statistics.median(r.get("duration_ms", 0) for r in runs) / 1000
            lines.append(f"| {tree} | {spec} | `{faults}` | {len(runs)} | {outcomes(runs)} | {session_summary(folder, runs)} | "
                         f"{reached if faults else '-'} | {behind} | {median:.0f} | {verdict} | "
                         f"{'yes' if ok else 'NO'} | {first_signature(runs)} |")
            s = stacks_of(camp / f"{tree}-{spec}", runs)
            if s:
                stacks.append(f"### {tree} {spec}\n\n```\n{s}\n```\n")
    text = "\n".join(lines) + "\n"
    text += "\nEvery requirement met.\n" if not failed else \
        "\nNot met:\n" + "".join(f"- {f}\n" for f in failed)
    if stacks:
        text += "\n## Stacks of the first hung run of each campaign\n\n" + "\n".join(stacks)
    return text


def main(argv) -> int:
    args = list(argv[1:])
    timeout = "100s"
    if len(args) >= 2 and args[0] == "--timeout":
        timeout = args[1]
        args = args[2:]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(args[0])
    if not (out / "campaigns").is_dir():
        print(f"cuda-python-table.py: {out} holds no campaigns/ folder", file=sys.stderr)
        return 2
    try:
        timeout_s = seconds(timeout)
    except ValueError as e:
        print(f"cuda-python-table.py: --timeout: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(table(out, timeout_s))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
