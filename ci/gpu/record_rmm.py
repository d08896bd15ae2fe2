"""The RMM clients' part of ci/gpu/record.py: rmm/rmm-clients.txt (ci/gpu/rmm-gpu-run.sh's
summary of the RMM clients under `faultline exec`) as the record's section. Loaded by record.py
from beside it. Python 3 standard library only."""
import importlib.util
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def _load_helpers():
    spec = importlib.util.spec_from_file_location("record_helpers", os.path.join(HERE, "record_helpers.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_helpers = _load_helpers()
read_text, tick = _helpers.read_text, _helpers.tick

SUMMARY = re.compile(r"^(?P<name>\S+): (?P<runs>\d+) runs?, (?P<outcomes>[^;]*); failure rate (?P<rate>[\d.]+)% "
                     r"\(95% CI (?P<lo>[\d.]+)% - (?P<hi>[\d.]+)%\)")
SIGNATURE = re.compile(r"^\s+(?P<count>\d+)x (?P<kind>\S+)\s+(?P<sig>.*)$")
CASE = re.compile(r"^=== (?P<name>[A-Za-z0-9_.+-]+)\s*$")


def parse_rmm(text):
    """[{name, summary: match or None, signatures: [(count, kind, sig)], stack: [lines], lines}]"""
    cases, cur, in_stack = [], None, False
    for line in text.splitlines():
        m = CASE.match(line)
        if m:
            cur = {"name": m["name"], "summary": None, "signatures": [], "stack": [], "stack_file": None,
                   "repro": None, "header": []}
            cases.append(cur)
            in_stack = False
            continue
        if cur is None:
            continue
        if line.startswith("--- "):
            in_stack = True
            cur["stack_file"] = line[4:].strip()
            continue
        if in_stack:
            cur["stack"].append(line)
            continue
        if (s := SUMMARY.match(line)) and cur["summary"] is None:
            cur["summary"] = s
        elif (s := SIGNATURE.match(line)) and cur["summary"] is not None:
            cur["signatures"].append((int(s["count"]), s["kind"], s["sig"].strip()))
        elif line.strip().startswith("repro:"):
            cur["repro"] = line.strip()[len("repro:"):].strip()
        elif line.startswith("faultline:"):
            cur["header"].append(line)
    return cases


def crash_frames(stack, limit=15):
    """Up to `limit` frames of the crashing thread (the thread named in the first `=== process`
    line), else the first frames of the file, else its first lines."""
    thread = None
    for line in stack:
        m = re.match(r"^=== process \d+ .*thread (\d+)", line)
        if m:
            thread = m[1]
            break
    frames = []
    if thread:
        inside = False
        for line in stack:
            if re.match(r"^Thread \d+ ", line):
                inside = re.search(rf"\bLWP {thread}\b", line) is not None
                continue
            if line.startswith("=== "):
                if frames:
                    break
                continue
            if inside and line.startswith("#"):
                frames.append(line)
    if not frames:
        frames = [line for line in stack if line.startswith("#")]
    if not frames:
        frames = [line for line in stack if line.strip()]
    return frames[:limit]


def rmm(rec, raw):
    rec.out("## RMM clients under `faultline exec` (26.04: before RMM #2367; 26.06: with it)")
    rec.out()
    path = os.path.join(raw, "rmm", "rmm-clients.txt")
    text = read_text(path)
    if text is None:
        skipped = read_text(os.path.join(raw, "rmm-skipped.txt"))
        rec.not_run(skipped.strip() if skipped else "no rmm/rmm-clients.txt")
        return
    cases = parse_rmm(text)
    if not cases:
        rec.fail("rmm", "rmm/rmm-clients.txt holds no case")
        rec.not_run("rmm/rmm-clients.txt holds no case")
        return
    rows = []
    for c in cases:
        s = c["summary"]
        top = c["signatures"][0] if c["signatures"] else None
        if s is None:
            rows.append([tick(c["name"]), "-", "no summary (faultline exec gave none)", "-", "-"])
            rec.fail("rmm", f"{c['name']}: no summary from faultline exec")
            continue
        rows.append([tick(c["name"]), s["runs"], s["outcomes"],
                     f"{float(s['rate']):.1f}% ({float(s['lo']):.1f}–{float(s['hi']):.1f}%)",
                     f"{top[0]}× {top[1]} {tick(top[2])}" if top else "-"])
    rec.out("Cases: release, `_worker` a detached thread still allocating while `main` returns, "
            "`_amplified` with `exit/end=delay(100ms)`.")
    rec.out()
    rec.table(["case", "runs", "outcomes", "failure rate (95% CI)", "top signature"], rows)
    crashed = [c for c in cases if "2604" in c["name"] and c["stack"]
               and c["summary"] is not None and "crash" in c["summary"]["outcomes"]]
    crashed = crashed or [c for c in cases if "2604" in c["name"] and c["stack"]]
    if crashed:
        c = crashed[0]
        frames = crash_frames(c["stack"])
        rec.out(f"First crash of {tick(c['name'])}, the crashing thread's frames as faultline read them "
                f"({c['stack_file'] or 'crash-stacks.txt'}; the signature keeps the top frames):")
        rec.out()
        rec.code("\n".join(frames))
    else:
        rec.out("No 26.04 case has a crash's stack in the summary.")
        rec.out()


