#!/usr/bin/env python3
"""The HAMi-core stall table (issue 18, item 5) from ci/gpu/hami-run.sh's output folder.

    ci/gpu/hami-table.py OUT            Markdown on stdout

For each commit and kill point (each a faultline campaign in OUT/COMMIT/NAME/): the runs, those in
which a worker was killed (hami_workers' "killed by signal 9" lines), those in which another worker
stalled (hami_workers flagged a wait of 8 s or more) and those that hung until the outer timeout
(faultline's verdict `hang`, with the signature of the stuck processes' stacks); the survivors'
longest context start and allocation against the same commit's clean runs. Standard library only.
"""
import json
import re
import statistics
import sys
from pathlib import Path

POINTS = ["clean", "lock-acquired", "lock-acquired-long", "lock-held", "lock-release", "release-inlined", "release-jump", "postinit", "usage-update"]
WORKER = re.compile(r"^worker (\d+): context ([0-9.]+) s, (\d+) allocations, longest ([0-9.]+) s$")


def campaign(folder: Path):
    results = folder / "results.jsonl"
    if not results.is_file():
        return None
    runs = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    rows = []
    for r in runs:
        log = folder / r["log"] if r.get("log") else None
        text = log.read_text(errors="replace") if log and log.is_file() else ""
        workers = [WORKER.match(line) for line in text.splitlines()]
        workers = [(float(m.group(2)), float(m.group(4))) for m in workers if m]
        rows.append({
            "outcome": r["outcome"],
            "signature": r.get("signature", ""),
            "killed": text.count("killed by signal 9"),
            "stalled": text.count(" stalled "),
            "contexts": [c for c, _ in workers],
            "allocations": [a for _, a in workers],
            "faults": r.get("faults") or "",
            "reached": r.get("points_reached") or [],
        })
    return rows


def spread(values):
    if not values:
        return "-"
    return f"{min(values):.1f}-{max(values):.1f} s (median {statistics.median(values):.1f})"


def table(out: Path) -> str:
    lines = ["| commit | point | spec | runs | reached (matched as) | a worker killed | others stalled >= 8 s | "
             "hung (outer timeout) | survivors' context start | longest allocation | hang signatures |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for commit_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        for name in POINTS:
            rows = campaign(commit_dir / name)
            if rows is None:
                summary = commit_dir / f"{name}.summary"
                refusal = [line for line in (summary.read_text(errors="replace").splitlines() if summary.is_file() else [])
                           if "error:" in line]
                if refusal:
                    text = refusal[0].split("error:", 1)[1].strip()[:160].replace("|", "\\|")
                    lines.append(f"| {commit_dir.name} | {name} | | 0 | refused before run 1: {text} | | | | | | |")
                continue
            killed = [r for r in rows if r["killed"]]
            stalled = [r for r in rows if r["stalled"]]
            hung = [r for r in rows if r["outcome"] == "hang"]
            contexts = [c for r in (killed if name != "clean" else rows) for c in r["contexts"]]
            allocations = [a for r in (killed if name != "clean" else rows) for a in r["allocations"]]
            signatures = {}
            for r in hung:
                signatures[r["signature"]] = signatures.get(r["signature"], 0) + 1
            sig_text = "; ".join(f"{n}x `{s}`" for s, n in sorted(signatures.items(), key=lambda x: -x[1])) or "-"
            sig_text = sig_text.replace("|", "\\|")
            spec = rows[0]["faults"].replace("|", "\\|") if rows else ""
            item = spec.split("=", 1)[0] if spec else ""
            reached = [r for r in rows if item and any(p == item for p in r["reached"])]
            matched = sorted({p.split(" in ", 1)[1] for r in rows for p in r["reached"] if p.startswith(item + " in ")})
            reach_text = "-" if not item else f"{len(reached)}" + (f" ({'; '.join(matched)})" if matched else "")
            lines.append(f"| {commit_dir.name} | {name} | `{spec or '(none)'}` | {len(rows)} | {reach_text} | {len(killed)} | "
                         f"{len(stalled)} | {len(hung)} | {spread(contexts)} | {spread(allocations)} | {sig_text} |")
    entries = []
    for commit_dir in sorted(p for p in out.iterdir() if p.is_dir()):
        bare = commit_dir / "bare.log"
        seen = {}
        for line in (bare.read_text(errors="replace").splitlines() if bare.is_file() else []):
            m = re.match(r"^worker \d+: entry (\S+) runtime=(\S+) dlsym=(\S+)$", line)
            if m:
                seen.setdefault(m.group(1), (m.group(2), m.group(3)))
        if seen:
            entries.append(f"- {commit_dir.name}: " + ", ".join(f"`{k}` runtime {v[0]}, dlsym {v[1]}" for k, v in seen.items()))
    if entries:
        lines += ["", "Entry points the worker's runtime calls resolve to (hami_workers --entry-points, bare run):"] + entries
    return "\n".join(lines)


def main(argv) -> int:
    if len(argv) != 2 or not Path(argv[1]).is_dir():
        print("usage: ci/gpu/hami-table.py OUT", file=sys.stderr)
        return 2
    print(table(Path(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
