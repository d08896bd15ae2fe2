#!/usr/bin/env python3
"""The GPU check's record, as Markdown on stdout, from the raw results ci/gpu-check wrote.

    python3 ci/gpu/record.py RAW_DIR > records/gpu/DATE.md

Reads whatever parts RAW_DIR holds (a part whose files are missing reads "not run"):
  machine.txt                   GPU, driver, CPU, kernel, date, commit (the header)
  tests/NAME.json, NAME.txt     GoogleTest --gtest_output=json and the console (skip reasons)
  verify/main.jsonl, ipc.jsonl  `faultline verify --json`, one line per scenario and variant
  bench/NAME.json, NAME.txt     Google Benchmark JSON (aggregates with repetitions): alloc_bench
                                (+ alloc_bench_random), context_epoch_bench, accounting_bench,
                                registry_bench, faults_point_bench; a file cut short by a crash
                                is read up to its last whole entry
  overhead.json                 the harness's cost per run
  overhead-jJ.json              ci/overhead.py: shell loops (and ctest) vs faultline exec at --jobs J,
                                judged against the targets (<= 0.5 ms per run at J = 1; >= 0.8x the
                                loops' throughput at J = cores)
  fidelity.json                 ci/fidelity.py: each program bare through a pipe (the reference), to
                                /dev/null, to a file, and under faultline exec; a harness rate
                                outside the pipe's 95% interval is a failed check
  exit-efficiency.jsonl         runs to first failure per subject, seed, with and without injector
  rmm/rmm-clients.txt           ci/gpu/rmm-gpu-run.sh's summary of the RMM clients under exec
  sanitizer.jsonl               compute-sanitizer over the device scenarios
and ends with every check that did not hold. Python 3 standard library only (the GPU machine
has no pip). Exit status 0, also when checks failed (the record says which); 2 on bad usage.
"""
import collections
import importlib.util
import json
import math
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# The targets.
DEVICE_OVER_POOL_TARGET = 100.0    # pool pairs >= 100x faster than cudaMalloc/cudaFree pairs
RMM_OVER_POOL_TARGET = 1.0         # pool no slower than RMM's pool_memory_resource
ACCOUNTING_P99_OVER_P50_TARGET = 3.0
UNREGISTER_OVERHEAD_TARGET_MS = 1.0
EXEC_OVERHEAD_TARGET_MS = 0.5       # faultline exec's cost per run of a no-op program, --jobs 1
EXEC_THROUGHPUT_TARGET = 0.8        # faultline exec's throughput vs the shell loops, --jobs = cores


def _load_sibling(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


alloc_ratios = _load_sibling("alloc_ratios", "alloc-ratios.py")
# The output helpers and the RMM clients' section live beside this file.
_helpers = _load_sibling("record_helpers", "record_helpers.py")
Record, cell, tick, num, ratio = _helpers.Record, _helpers.cell, _helpers.tick, _helpers.num, _helpers.ratio
read_text, tail, jsonl, median_or_inf = _helpers.read_text, _helpers.tail, _helpers.jsonl, _helpers.median_or_inf
_rmm = _load_sibling("record_rmm", "record_rmm.py")
SUMMARY, SIGNATURE, CASE = _rmm.SUMMARY, _rmm.SIGNATURE, _rmm.CASE
parse_rmm, crash_frames, rmm = _rmm.parse_rmm, _rmm.crash_frames, _rmm.rmm


# ---------------------------------------------------------------------------------------------
# Header

def machine(rec, raw):
    """The header; returns the device backend the checks ran on (FAULTLINE_DEVICE), or None."""
    text = read_text(os.path.join(raw, "machine.txt"))
    if text is None:
        rec.out("# GPU check record")
        rec.out()
        rec.not_run("no machine.txt")
        return None
    fields, gpus = {}, []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        m = re.match(r"^(cpu|kernel|device|date|commit):\s*(.*)$", line)
        if m:
            fields[m[1]] = re.sub(r"\s+", " ", m[2]).strip()
        elif "nvidia-smi" in line and ("not found" in line or "No such file" in line):
            gpus.append("none: nvidia-smi not found (a dry run without a GPU)")
        elif line.count(",") >= 1 and not line.startswith(("NVIDIA-SMI has failed", "Failed")):
            parts = [p.strip() for p in line.split(",")]
            desc = parts[0]
            if len(parts) > 1:
                desc += f", driver {parts[1]}"
            if len(parts) > 2:
                desc += f", {parts[2]}"
            gpus.append(desc)
        else:
            gpus.append(line)
    day = fields.get("date", "")[:10]
    rec.out(f"# GPU check record{', ' + day if day else ''}")
    rec.out()
    rows = [["GPU", "; ".join(gpus) or "unknown"]]
    for key, name in (("cpu", "CPU"), ("kernel", "kernel"), ("device", "FAULTLINE_DEVICE"), ("commit", "commit"),
                      ("date", "date")):
        if key in fields:
            rows.append([name, fields[key]])
    rec.table(["", ""], rows)
    device = fields.get("device")
    if device and device != "cuda":
        rec.out(f"**The checks ran on the `{device}` backend (FAULTLINE_DEVICE={device}), not on a GPU: a dry run "
                f"of the sweep; no figure below is a GPU measurement.**")
        rec.out()
    return device


# ---------------------------------------------------------------------------------------------
# Unit tests

def skip_reasons_from_console(text):
    """{suite.test: reason} from GoogleTest's console output (the JSON of gtest < 1.13 has none)."""
    reasons = {}
    pending = []
    for line in (text or "").splitlines():
        m = re.match(r"^\[\s+SKIPPED\s+\] (\S+?)( \(\d+ ms\))?$", line)
        if m:
            msg = [x for x in pending if not re.match(r"^\S+:\d+: Skipped$", x)]
            if m[2] is not None or m[1] not in reasons:
                reasons[m[1]] = " ".join(msg).strip() or reasons.get(m[1], "")
            pending = []
        elif line.startswith("[ RUN      ]") or line.startswith("[       OK ]") or line.startswith("[  FAILED  ]"):
            pending = []
        else:
            pending.append(line.strip())
    return reasons


def tests(rec, raw):
    rec.out(f"## Unit tests (FAULTLINE_DEVICE={rec.device or 'cuda'})")
    rec.out()
    d = os.path.join(raw, "tests")
    names = sorted({os.path.splitext(f)[0] for f in os.listdir(d)}) if os.path.isdir(d) else []
    if not names:
        rec.not_run("no tests/*.json")
        return
    rows, notes = [], []
    for name in names:
        base = os.path.join(d, name)
        console = read_text(base + ".txt")
        if os.path.exists(base + ".missing"):
            rows.append([name, "-", "-", "-", "-", "binary missing", ""])
            rec.fail("tests", f"{name}: the binary was not there ({read_text(base + '.missing').strip()})")
            continue
        try:
            with open(base + ".json") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            rows.append([name, "-", "-", "-", "-", "no JSON: the binary died before writing it", ""])
            rec.fail("tests", f"{name}: no test report ({type(e).__name__}); last lines of its output in the record")
            notes.append((name, tail(console, 8) or "(no output)"))
            continue
        console_reasons = skip_reasons_from_console(console)
        total = passed = skipped = disabled = 0
        failed, reasons = [], collections.Counter()
        for suite in doc.get("testsuites", []):
            for t in suite.get("testsuite", []):
                full = f"{suite.get('name')}.{t.get('name')}"
                total += 1
                if t.get("status") == "NOTRUN":
                    disabled += 1
                elif t.get("failures"):
                    first = str(t["failures"][0].get("failure", "")).splitlines()
                    where = os.path.basename(first[0]) if first and re.match(r"^\S+:\d+$", first[0]) else ""
                    failed.append((full, where))
                elif t.get("result") == "SKIPPED":
                    skipped += 1
                    msg = ""
                    if isinstance(t.get("skipped"), list) and t["skipped"]:
                        msg = t["skipped"][0].get("message", "")
                    msg = msg or console_reasons.get(full, "")
                    msg = re.sub(r"^\S+:\d+\n?", "", msg).strip() or "(no reason given)"
                    reasons[msg.splitlines()[0]] += 1
                else:
                    passed += 1
        why = "; ".join(f"{n}× {r}" for r, n in reasons.most_common())
        rows.append([name, total, passed, len(failed), skipped, why,
                     ", ".join(tick(f) + (f" ({w})" if w else "") for f, w in failed)])
        for f, w in failed:
            rec.fail("tests", f"{name}: {f} failed" + (f" ({w})" if w else ""))
        if disabled:
            rows[-1][5] = (rows[-1][5] + "; " if rows[-1][5] else "") + f"{disabled} disabled"
    rec.table(["binary", "tests", "passed", "failed", "skipped", "skip reasons", "failures"], rows)
    for name, text in notes:
        rec.out(f"{name}, last lines of its output:")
        rec.code(text)


# ---------------------------------------------------------------------------------------------
# faultline verify

def verify(rec, raw):
    rec.out("## faultline verify (clean variants never fail, bug points detected)")
    rec.out()
    found = False
    rows, bad_rows = [], []
    for part in ("main", "ipc"):
        path = os.path.join(raw, "verify", f"{part}.jsonl")
        if not os.path.exists(path):
            continue
        found = True
        objs, bad = jsonl(path)
        if bad:
            rec.fail("verify", f"verify/{part}.jsonl: {bad} line(s) that are not JSON")
        if not objs:
            err = read_text(os.path.join(raw, "verify", f"{part}.err"))
            rec.fail("verify", f"verify/{part}: no result (last lines of verify/{part}.err in the record)")
            rec.out(f"verify/{part} gave no result; last lines of its stderr:")
            rec.code(tail(err, 10) or "(empty)")
        for o in objs:
            runs = o.get("runs", 0)
            bug = o.get("variant", "clean") != "clean"
            count = o.get("detections", o.get("failures")) if bug else o.get("failures")
            what = "detections" if bug else "failures"
            required = o.get("required_rate")
            req = (f"≥ {required:.0%} detected" if bug else "none fails") if isinstance(required, (int, float)) else "-"
            outcomes = ", ".join(f"{k} {v}" for k, v in (o.get("outcomes") or {}).items() if v)
            ok = bool(o.get("ok"))
            rows.append([o.get("scenario", o.get("name")), o.get("variant"), runs,
                         f"{count}/{runs} {what}", outcomes, req, "OK" if ok else "**FAIL**"])
            if not ok:
                bad_rows.append(o)
    if not found:
        rec.not_run("no verify/*.jsonl")
        return
    if rows:
        rec.table(["scenario", "variant", "runs", "failures / detections", "outcomes", "required", "result"], rows)
    if bad_rows:
        rec.out("Rows not OK:")
        rec.out()
        for o in bad_rows:
            sigs = o.get("signatures") or []
            top = sigs[0] if sigs else None
            topline = (f"top signature {tick(top.get('signature'))} ({top.get('count')}× "
                       f"{top.get('outcome')}/{top.get('phase')})") if top else "no signature"
            rec.out(f"- {tick(o.get('scenario'))} {tick(o.get('variant'))}: {o.get('failures')}/{o.get('runs')} failed, "
                    f"{topline}; repro: {tick(o.get('repro') or '-')}")
            rec.fail("verify", f"{o.get('scenario')} {o.get('variant')}: {o.get('check', 'check')} did not hold "
                               f"({o.get('failures')}/{o.get('runs')} failed; required rate {o.get('required_rate')})")
        logs = sorted(f for f in os.listdir(os.path.join(raw, "verify")) if f.endswith("-logs.tgz"))
        if logs:
            rec.out(f"- their logs: {', '.join('verify/' + f for f in logs)}")
        rec.out()
    never = [(o.get("scenario"), o.get("variant"), o["points_never_reached"]) for part in ("main", "ipc")
             for o in jsonl(os.path.join(raw, "verify", f"{part}.jsonl"))[0] if o.get("points_never_reached")]
    for s, v, pts in never:
        rec.out(f"- {tick(s)} {tick(v)}: points never reached: {', '.join(tick(p) for p in pts)}")
    if never:
        rec.out()


# ---------------------------------------------------------------------------------------------
# Benchmarks

def load_bench(path):
    """(document, cut_short) of a Google Benchmark JSON file; a file cut short (the binary died
    while writing it) is read up to its last whole benchmark entry. None when unreadable."""
    text = read_text(path)
    if text is None:
        return None, False
    try:
        return json.loads(text), False
    except ValueError:
        pass
    dec = json.JSONDecoder()
    doc = {"context": {}, "benchmarks": []}
    m = re.search(r'"context"\s*:\s*', text)
    if m:
        try:
            doc["context"], _ = dec.raw_decode(text, m.end())
        except ValueError:
            pass
    m = re.search(r'"benchmarks"\s*:\s*\[', text)
    if m:
        i = m.end()
        while True:
            while i < len(text) and text[i] in " \t\r\n,":
                i += 1
            try:
                obj, i = dec.raw_decode(text, i)
            except ValueError:
                break
            doc["benchmarks"].append(obj)
    return doc, True


class Suite:
    """One benchmark binary's results, by run name: the median aggregate where there are
    repetitions, else the mean of the runs; errors by run name."""

    def __init__(self, doc):
        self.context = doc.get("context", {})
        self.order = []
        self.runs = collections.defaultdict(list)
        self.aggs = collections.defaultdict(dict)
        self.errors = {}
        for b in doc.get("benchmarks", []):
            name = b.get("run_name", b.get("name", ""))
            if name not in self.order:
                self.order.append(name)
            if b.get("error_occurred"):
                self.errors.setdefault(name, b.get("error_message", "error"))
            elif b.get("run_type") == "aggregate":
                self.aggs[name][b.get("aggregate_name")] = b
            else:
                self.runs[name].append(b)

    def names(self, prefix=""):
        return [n for n in self.order if n.startswith(prefix)]

    def has(self, name):
        return "median" in self.aggs.get(name, {}) or bool(self.runs.get(name))

    def field(self, name, key, stat="median"):
        """A field (a counter, or real_time in ns) of the median (or `stat`) aggregate, else the
        mean over the runs."""
        agg = self.aggs.get(name, {}).get(stat)
        entries = [agg] if agg else self.runs.get(name, [])
        values = []
        for e in entries:
            if key not in e:
                continue
            v = e[key]
            if key in ("real_time", "cpu_time"):
                v = v * TO_NS.get(e.get("time_unit", "ns"), 1.0)
            values.append(v)
        if not values:
            return None
        if stat == "stddev" and not agg:
            return statistics.stdev(values) if len(values) > 1 else None
        return statistics.mean(values)

    def ns(self, name):
        return self.field(name, "real_time")

    def label(self, name):
        agg = self.aggs.get(name, {}).get("median")
        e = agg or (self.runs.get(name) or [{}])[0]
        return e.get("label", "")


def bench_files(raw, name):
    """(Suite or None, note) for bench/NAME.json and bench/NAME_*.json merged; the note says
    what went wrong (a binary missing, a run that died)."""
    d = os.path.join(raw, "bench")
    if not os.path.isdir(d):
        return None, None
    paths = sorted(os.path.join(d, f) for f in os.listdir(d)
                   if f.endswith(".json") and (f == name + ".json" or f.startswith(name + "_")))
    missing = os.path.exists(os.path.join(d, name + ".missing"))
    if not paths:
        return None, ("binary missing" if missing else None)
    merged = {"context": {}, "benchmarks": []}
    notes = []
    for p in paths:
        doc, short = load_bench(p)
        base = os.path.splitext(os.path.basename(p))[0]
        console = read_text(os.path.splitext(p)[0] + ".txt") or ""
        status = re.findall(r"^exit status (\d+)$", console, re.M)
        if doc is None:
            notes.append(f"bench/{base}.json unreadable")
            continue
        if short or status:
            why = f"exit status {status[-1]}" if status else "the JSON was cut short"
            sig = {"139": " (SIGSEGV)", "134": " (SIGABRT)", "137": " (SIGKILL)"}.get(status[-1] if status else "", "")
            notes.append(f"bench/{base}: {why}{sig}; read up to its last whole entry "
                         f"({len(doc.get('benchmarks', []))} entries)")
        merged["context"] = merged["context"] or doc.get("context", {})
        merged["benchmarks"] += doc.get("benchmarks", [])
    return Suite(merged), "; ".join(notes) or None


def suite_header(rec, suite, note, part):
    ctx = suite.context
    bits = []
    if ctx.get("date"):
        bits.append(ctx["date"])
    if ctx.get("num_cpus"):
        bits.append(f"{ctx['num_cpus']} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz")
    if bits:
        rec.out("*" + "; ".join(bits) + "*")
        rec.out()
    if note:
        rec.out(f"**{note}**")
        rec.out()
        rec.fail("bench", f"{part}: {note}")


def errors_block(rec, suite, names):
    msgs = collections.Counter(suite.errors[n] for n in names if n in suite.errors and not suite.has(n))
    for msg, n in msgs.most_common():
        rec.out(f"- {n} skipped: {msg}")
    if msgs:
        rec.out()


def verdict(ok):
    return "MET" if ok else "**NOT MET**"


def alloc(rec, raw):
    suite, note = bench_files(raw, "alloc_bench")
    rec.out("### Allocation pairs: pool vs cudaMalloc/cudaFree vs cudaMallocAsync vs RMM's pool")
    rec.out()
    if suite is None:
        rec.not_run(note or "no bench/alloc_bench.json")
        rec.out("### RMM's random-allocations shape")
        rec.out()
        rec.not_run(note or "no bench/alloc_bench_random.json")
        return
    suite_header(rec, suite, note, "alloc_bench")
    parsed = {"times": {}, "stddev": {}, "errors": {}, "labels": {}}
    d = os.path.join(raw, "bench")
    for f in sorted(os.listdir(d)):
        if f.endswith(".json") and (f == "alloc_bench.json" or f.startswith("alloc_bench_")):
            doc, _ = load_bench(os.path.join(d, f))
            if doc:
                alloc_ratios.parse(doc, parsed)
    times, errors, sd = parsed["times"], parsed["errors"], parsed["stddev"]
    labels = set(parsed["labels"].values())
    if labels and labels != {"cuda"}:
        rec.out(f"**Backend: {', '.join(sorted(labels))}, not cuda: these are not GPU measurements and "
                f"the targets below do not judge the GPU.**")
        rec.out()

    def t(case, kind):
        v = times.get((case, kind))
        if v is None:
            return "error" if (case, kind) in errors else "-"
        s = sd.get((case, kind))
        return num(v) + (f" ± {num(s, 2)}" if s else "")

    pair_cases = sorted({c for c, _ in list(times) + list(errors) if c[0] == "pairs"}, key=lambda c: c[2])
    if not pair_cases:
        rec.out("No bm_pairs case in the JSON.")
        rec.out()
    rows = []
    for c in pair_cases:
        g = {k: times.get((c, k)) for k in alloc_ratios.KINDS}
        dev_ok = rmm_ok = None
        if g["pool"] and g["device"]:
            dev_ok = g["device"] / g["pool"] >= DEVICE_OVER_POOL_TARGET
        if g["pool"] and g["rmm_pool"]:
            rmm_ok = g["rmm_pool"] / g["pool"] >= RMM_OVER_POOL_TARGET
        streams = f"{c[2]} stream{'s' if c[2] > 1 else ''}"

        def judge(ok, what, kind):
            if ok is None:
                why = errors.get((c, kind)) or errors.get((c, "pool")) or "not in the JSON"
                rec.cannot("alloc", f"{what}, {streams}: not measured ({why})")
                return f"not measured ({why})"
            if not ok:
                rec.fail("alloc", f"{what}, {streams}: {ratio(g[kind], g['pool'])} "
                                  f"({num(g[kind])} vs {num(g['pool'])} ns a pair)")
            return verdict(ok)
        rows.append([c[2], t(c, "pool"), t(c, "device"), t(c, "async"), t(c, "rmm_pool"),
                     ratio(g["device"], g["pool"]), ratio(g["async"], g["pool"]), ratio(g["rmm_pool"], g["pool"]),
                     judge(dev_ok, "pool ≥ 100× faster than cudaMalloc/cudaFree", "device"),
                     judge(rmm_ok, "pool no slower than RMM's pool", "rmm_pool")])
    if rows:
        rec.out("ns per allocate + deallocate pair (median of the repetitions ± stddev), all four in one "
                "run of one binary; ratios > 1 mean the pool is faster.")
        rec.out()
        rec.table(["streams", "pool", "device (cudaMalloc/cudaFree)", "async (cudaMallocAsync)", "rmm_pool",
                   "device/pool", "async/pool", "rmm_pool/pool",
                   "target: device/pool ≥ 100×", "target: rmm_pool/pool ≥ 1.00"], rows)

    rec.out("### RMM's random-allocations shape (bm_random/KIND/max_mib:N/streams:S)")
    rec.out()
    rand_cases = sorted({c for c, _ in list(times) + list(errors) if c[0] == "random"}, key=alloc_ratios.case_key)
    if not rand_cases:
        rec.not_run("no bm_random case in bench/alloc_bench*.json")
        return
    rec.out("ms per replay of the plan (2 × 1000 steps, the frees of what stays live included); "
            "ratios to rmm_pool (< 1: faster than RMM's pool).")
    rec.out()
    rows, notes, unmeasured = [], [], collections.defaultdict(list)

    def rt(c, k):
        v = times.get((c, k))
        if v is None:
            if (c, k) in errors:
                msg = errors[(c, k)]
                if msg not in notes:
                    notes.append(msg)
                return f"error [{notes.index(msg) + 1}]"
            return "-"
        return num(v / 1e6)
    for c in rand_cases:
        g = {k: times.get((c, k)) for k in alloc_ratios.KINDS}
        if g["pool"] and g["rmm_pool"]:
            ok = g["pool"] <= g["rmm_pool"] * RMM_OVER_POOL_TARGET
            v = verdict(ok)
            if not ok:
                rec.fail("alloc", f"random {c[1]}, {c[2]} stream{'s' if c[2] > 1 else ''}: pool {ratio(g['pool'], g['rmm_pool'])} "
                                  f"RMM's pool's time")
        else:
            v = "not measured"
            if g["pool"] or (c, "pool") not in errors:
                unmeasured[errors.get((c, "rmm_pool")) or "not in the JSON"].append(f"{c[1]}/{c[2]}")
        if not g["pool"] and (c, "pool") in errors:
            v = "**pool failed**"
            rec.fail("alloc", f"random {c[1]}, {c[2]} stream{'s' if c[2] > 1 else ''}: the pool failed: "
                              f"{errors[(c, 'pool')]}")
        rows.append([c[1], c[2], rt(c, "pool"), rt(c, "rmm_pool"), rt(c, "async"), rt(c, "device"),
                     ratio(g["pool"], g["rmm_pool"], ""), ratio(g["async"], g["rmm_pool"], ""),
                     ratio(g["device"], g["rmm_pool"], ""), v])
    rec.table(["max", "streams", "pool", "rmm_pool", "async", "device",
               "pool/rmm_pool", "async/rmm_pool", "device/rmm_pool", "target: pool/rmm_pool ≤ 1.00"], rows)
    for i, msg in enumerate(notes, 1):
        rec.out(f"[{i}] {msg}  ")
    if notes:
        rec.out()
    for why, cases in unmeasured.items():
        rec.cannot("alloc", f"random shape (max/streams) {', '.join(cases)}: pool vs RMM's pool not measured ({why})")


def context_epoch(rec, raw):
    rec.out("### Context epoch query")
    rec.out()
    suite, note = bench_files(raw, "context_epoch_bench")
    alloc_suite, _ = bench_files(raw, "alloc_bench")
    if suite is None and alloc_suite is None:
        rec.not_run(note or "no bench/context_epoch_bench.json")
        return
    rows = []
    if suite is not None:
        suite_header(rec, suite, note, "context_epoch_bench")
        for n in suite.names():
            if suite.has(n):
                m = re.search(r"threads:(\d+)", n)
                sd = suite.field(n, "real_time", "stddev")
                rows.append([tick(n.split("/")[0]), m[1] if m else 1, num(suite.ns(n)) + (f" ± {num(sd, 2)}" if sd else "")])
    if alloc_suite is not None and alloc_suite.has("bm_context_epoch"):
        sd = alloc_suite.field("bm_context_epoch", "real_time", "stddev")
        rows.append([f"alloc_bench `bm_context_epoch` (backend {alloc_suite.label('bm_context_epoch') or '?'})", 1,
                     num(alloc_suite.ns("bm_context_epoch")) + (f" ± {num(sd, 2)}" if sd else "")])
    if rows:
        rec.out("ns per call (median ± stddev; with threads, wall time per call):")
        rec.out()
        rec.table(["query", "threads", "ns"], rows)
    if suite is not None:
        errors_block(rec, suite, suite.names())
        if not any(suite.has(n) for n in suite.names()):
            rec.cannot("context epoch", "context_epoch_bench: every benchmark skipped")


def accounting(rec, raw):
    rec.out("### Accounting: a 256 MiB charge under contention")
    rec.out()
    suite, note = bench_files(raw, "accounting_bench")
    if suite is None:
        rec.not_run(note or "no bench/accounting_bench.json")
        return
    suite_header(rec, suite, note, "accounting_bench")
    rows = []
    for n in suite.names("contended_"):
        if not suite.has(n):
            continue
        m = re.match(r"contended_(charge|atomic)/(\d+)(?:/(\d+))?", n)
        if not m:
            continue
        kind = "region charge" if m[1] == "charge" else "bare fetch_add (the floor)"
        watcher = "-" if m[3] is None else ("yes" if m[3] == "1" else "no")
        rows.append([kind, int(m[2]) + 1, watcher, num(suite.field(n, "p50_ns")), num(suite.field(n, "p99_ns")),
                     f"{suite.field(n, 'p99_over_p50'):.2f}" if suite.field(n, "p99_over_p50") is not None else "-"])
    if rows:
        rec.out("p50 and p99 of this process's charge while the others charge and release in a loop "
                "(median over the repetitions):")
        rec.out()
        rec.table(["what", "processes", "watcher (5 ms query)", "p50 ns", "p99 ns", "p99/p50"], rows)
    target = next((n for n in suite.names("contended_charge/7/1") if suite.has(n)), None)
    floor = next((n for n in suite.names("contended_atomic/7") if suite.has(n)), None)
    if target:
        v = suite.field(target, "p99_over_p50")
        ok = v is not None and v <= ACCOUNTING_P99_OVER_P50_TARGET
        line = (f"Target (the issue): p99/p50 ≤ {ACCOUNTING_P99_OVER_P50_TARGET:g} for a charge among 8 processes "
                f"with the watcher: {v:.2f}, {verdict(ok)}")
        if floor and suite.field(floor, "p99_over_p50") is not None:
            line += (f"; the hardware's floor on this machine (a bare fetch_add on one shared line, 8 processes): "
                     f"{suite.field(floor, 'p99_over_p50'):.2f}")
        rec.out(line + ".")
        rec.out()
        if not ok:
            rec.fail("accounting", f"contended charge p99/p50 {v:.2f} > {ACCOUNTING_P99_OVER_P50_TARGET:g}"
                     + (f" (floor {suite.field(floor, 'p99_over_p50'):.2f})" if floor else ""))
    else:
        rec.cannot("accounting", "contended_charge/7/1 not measured")
    other = []
    for prefix, what in (("charge_release", "uncontended charge + release"),
                         ("slots_sum/64", "consistent read over 64 live slots"),
                         ("lock_recovery", "SIGKILL of the lock holder to the next holder, repair included")):
        n = next((x for x in suite.names(prefix) if suite.has(x)), None)
        if n:
            other.append([what, num(suite.ns(n) / 1e3) + " µs"])
    if other:
        rec.table(["other costs", "median"], other)
    errors_block(rec, suite, suite.names())


def registry(rec, raw):
    rec.out("### Registry: saves vs a bare cudaMemcpyAsync loop, unregister under load")
    rec.out()
    suite, note = bench_files(raw, "registry_bench")
    if suite is None:
        rec.not_run(note or "no bench/registry_bench.json")
        return
    suite_header(rec, suite, note, "registry_bench")
    rows = []
    for n in suite.names("save_throughput/"):
        if not suite.has(n):
            continue
        size = int(n.split("/")[1])
        label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        save, copy = suite.field(n, "save_GBps"), suite.field(n, "copy_GBps")
        rows.append([label, num(save), num(copy), ratio(save, copy, ""), suite.label(n)])
    if rows:
        rec.out("64 MiB saved as blocks of each size (device → host, stream sync, checksum, store) against "
                "copy_async of the same blocks and one sync, in the same iteration; GB/s, medians:")
        rec.out()
        rec.table(["block", "save GB/s", "bare copy GB/s", "save/copy", "backend"], rows)
    else:
        rec.cannot("registry", "save_throughput not measured")
    rows = []
    for n in suite.names("unregister/"):
        if not suite.has(n):
            continue
        over = suite.field(n, "overhead_ms")
        ok = over is not None and over < UNREGISTER_OVERHEAD_TARGET_MS
        rows.append([n.split("/")[1], num(suite.field(n, "unregister_ms")), num(suite.field(n, "drain_alone_ms")),
                     num(over), verdict(ok)])
        if not ok:
            rec.fail("registry", f"unregister with {n.split('/')[1]} queued saves: overhead {num(over)} ms "
                                 f"≥ {UNREGISTER_OVERHEAD_TARGET_MS:g} ms")
    if rows:
        rec.table(["queued saves", "unregister ms", "drained alone ms", "overhead ms",
                   f"target: overhead < {UNREGISTER_OVERHEAD_TARGET_MS:g} ms"], rows)
    errors_block(rec, suite, suite.names())


def fault_points(rec, raw):
    rec.out("### Fault point cost")
    rec.out()
    suite, note = bench_files(raw, "faults_point_bench")
    if suite is None:
        rec.not_run(note or "no bench/faults_point_bench.json")
        return
    suite_header(rec, suite, note, "faults_point_bench")
    what = {"BM_no_point": "macro compiled out", "BM_point_disabled": "point, nothing enabled",
            "BM_point_enabled_other": "point, another point enabled", "BM_point_enabled_fail": "point that fires",
            "BM_raw_fiu_fail": "libfiu's fiu_fail on every hit"}
    base = suite.ns("BM_no_point") if suite.has("BM_no_point") else None
    rows = [[tick(n), what.get(n, ""), num(suite.ns(n)), ratio(suite.ns(n), base) if base else "-"]
            for n in suite.names() if suite.has(n)]
    if rows:
        rec.table(["benchmark", "what", "ns per hit", "vs compiled out"], rows)
    errors_block(rec, suite, suite.names())


def benchmarks(rec, raw):
    rec.out("## Benchmarks")
    rec.out()
    if not os.path.isdir(os.path.join(raw, "bench")):
        rec.not_run("no bench/")
        return
    for part in (alloc, context_epoch, accounting, registry, fault_points):
        part(rec, raw)


# ---------------------------------------------------------------------------------------------
# Harness overhead, exit races

def overhead(rec, raw):
    rec.out("## Harness overhead per run")
    rec.out()
    text = read_text(os.path.join(raw, "overhead.json"))
    if text is None:
        rec.not_run("no overhead.json")
        return
    try:
        o = json.loads(text)
        bare = float(o["bare_ms_per_run"])
    except (ValueError, KeyError, TypeError):
        rec.fail("overhead", "overhead.json unreadable")
        rec.out("overhead.json unreadable.")
        rec.out()
        return
    rec.out(f"{o.get('runs', '?')} runs of a trivial program (`fl_testdata_pass`), one at a time:")
    rec.out()
    rows = [["bare (a shell loop)", num(bare), "-", "1.00×"]]
    for key, name in (("exec_ms_per_run", "`faultline exec` (agent preloaded)"),
                      ("exec_no_preload_ms_per_run", "`faultline exec --no-preload`")):
        if o.get(key) is not None:
            v = float(o[key])
            rows.append([name, num(v), num(v - bare), ratio(v, bare)])
    rec.table(["", "ms per run", "overhead ms per run", "vs bare"], rows)


def overhead_bench(rec, raw):
    names = sorted((f for f in os.listdir(raw) if re.fullmatch(r"overhead-j\d+\.json", f)),
                   key=lambda f: int(f[len("overhead-j"):-len(".json")])) if os.path.isdir(raw) else []
    rec.out("## Harness overhead beside shell loops and ctest (ci/overhead.py)")
    rec.out()
    if not names:
        rec.not_run("no overhead-jJ.json")
        return
    for name in names:
        try:
            o = json.loads(read_text(os.path.join(raw, name)))
            jobs, rows = int(o["jobs"]), o["rows"]
            by_arm = {r["arm"]: r for r in rows}
        except (ValueError, KeyError, TypeError):
            rec.fail("overhead", f"{name} unreadable")
            rec.out(f"{name} unreadable.")
            rec.out()
            continue
        rec.out(f"`--jobs {jobs}`, {o.get('runs', '?')} runs of a no-op program per arm and round, "
                f"{o.get('rounds', '?')} rounds interleaved (median round; IQR):")
        rec.out()
        rec.table(["arm", "ms per run", "IQR", "overhead ms per run", "throughput vs loops"],
                  [[r["arm"], num(r["ms_per_run"]), f"{num(r['q1'])}–{num(r['q3'])}",
                    "-" if r.get("overhead_ms") is None else num(r["overhead_ms"]),
                    "-" if r.get("throughput_vs_loop") is None else f"{r['throughput_vs_loop']:.2f}×"] for r in rows])
        fl = by_arm.get("faultline")
        if fl is None or fl.get("overhead_ms") is None:
            continue
        if jobs == 1:
            met = fl["overhead_ms"] <= EXEC_OVERHEAD_TARGET_MS
            rec.out(f"Target: `faultline exec` costs <= {EXEC_OVERHEAD_TARGET_MS:g} ms per run beside the loop: "
                    f"{'MET' if met else 'NOT MET'} ({num(fl['overhead_ms'])} ms).")
            if not met:
                rec.fail("overhead", f"--jobs 1: {num(fl['overhead_ms'])} ms per run over the shell loop "
                                     f"(target <= {EXEC_OVERHEAD_TARGET_MS:g})")
        else:
            met = fl["throughput_vs_loop"] >= EXEC_THROUGHPUT_TARGET
            rec.out(f"Target: throughput >= {EXEC_THROUGHPUT_TARGET:g}× the loops': "
                    f"{'MET' if met else 'NOT MET'} ({fl['throughput_vs_loop']:.2f}×).")
            if not met:
                rec.fail("overhead", f"--jobs {jobs}: throughput {fl['throughput_vs_loop']:.2f}x the shell loops' "
                                     f"(target >= {EXEC_THROUGHPUT_TARGET:g}x)")
        rec.out()


def fidelity(rec, raw):
    rec.out("## Fidelity: failure rates bare and under `faultline exec` (ci/fidelity.py)")
    rec.out()
    text = read_text(os.path.join(raw, "fidelity.json"))
    if text is None:
        rec.not_run("no fidelity.json")
        return
    try:
        o = json.loads(text)
        rows = o["rows"]
        reference = o.get("reference", "bare-pipe")
    except (ValueError, KeyError, TypeError):
        rec.fail("fidelity", "fidelity.json unreadable")
        rec.out("fidelity.json unreadable.")
        rec.out()
        return
    rec.out(f"Interleaved round by round at `--jobs {o.get('jobs', '?')}`; the reference is `{reference}` "
            "(output through a pipe, as CI captures it). A harness arm is faithful unless its failure count "
            "differs from the reference's by Fisher's exact test (two-sided, p < 0.05); records made before "
            "the test was used judge by the reference's 95% interval.")
    rec.out()
    table = []
    for r in rows:
        if "faithful" in r:
            verdict, why = r["faithful"], f"differs from {reference} (p = {r.get('p_value', 0):.3g})"
        else:
            verdict, why = r.get("inside_reference_interval", r.get("inside_bare_interval")), f"outside the {reference} interval"
        mark = {None: "", True: "yes", False: "**NO**"}[verdict]
        p = r.get("p_value")
        table.append([f"`{r['program']}`", r["mode"], f"{r['failures']}/{r['runs']}",
                      f"{100 * r['rate']:.1f}% ({100 * r['lower95']:.1f}–{100 * r['upper95']:.1f}%)",
                      "" if p is None else f"{p:.3g}", mark])
        if verdict is False:
            rec.fail("fidelity", f"{r['program']} under {r['mode']}: {r['failures']}/{r['runs']}, {why}")
    rec.table(["program", "arm", "failed", "rate (95% CI)", "p", "faithful"], table)


def exit_efficiency(rec, raw):
    rec.out("## Exit races: runs to the first failure, without and with the amplifier")
    rec.out()
    path = os.path.join(raw, "exit-efficiency.jsonl")
    if not os.path.exists(path):
        rec.not_run("no exit-efficiency.jsonl")
        return
    objs, bad = jsonl(path)
    if bad:
        rec.fail("exit", f"exit-efficiency.jsonl: {bad} line(s) that are not JSON")
    by = collections.OrderedDict()
    for o in objs:
        by.setdefault(o.get("subject"), {False: [], True: []})[bool(o.get("injector"))].append(o)
    if not by:
        rec.not_run("exit-efficiency.jsonl is empty")
        return

    def show(entries):
        if not entries:
            return "-", None
        limit = entries[0].get("limit")
        vals, text = [], []
        for e in sorted(entries, key=lambda e: e.get("seed", 0)):
            if e.get("runs_to_failure") is not None:
                vals.append(e["runs_to_failure"])
                text.append(str(e["runs_to_failure"]))
            elif e.get("runs") is None:
                text.append("?")
            else:
                vals.append(None)
                text.append(f"> {e.get('limit', limit)}")
        med = median_or_inf(vals) if vals else None
        if med is None:
            head = "no result"
        elif math.isinf(med):
            head = f"> {limit}"
        else:
            head = num(float(med), 3).rstrip("0").rstrip(".") if med != int(med) else str(int(med))
        return f"**{head}** ({', '.join(text)})", med

    rows = []
    for subject, sides in by.items():
        without, _ = show(sides[False])
        with_, med_with = show(sides[True])
        rows.append([tick(subject), without, with_])
        for side in (False, True):
            lost = [e for e in sides[side] if e.get("runs") is None]
            if lost:
                rec.fail("exit", f"{subject} ({'with' if side else 'without'} the amplifier): "
                                 f"{len(lost)} of {len(sides[side])} campaigns gave no result")
        if sides[True] and med_with is not None and math.isinf(med_with) and all(
                e.get("runs_to_failure") is None for e in sides[True]):
            rec.fail("exit", f"{subject}: no failure within the limit with the amplifier, in any seed")
    rec.out("Median over the seeds, each seed's value in brackets (seed order); `> N`: no failure in N runs, "
            "`?`: the campaign gave no result. Amplifier: `exit/end=delay(100ms)`.")
    rec.out()
    rec.table(["subject", "without", "with the amplifier"], rows)


# ---------------------------------------------------------------------------------------------
# compute-sanitizer

def sanitizer(rec, raw):
    rec.out("## compute-sanitizer (memcheck, racecheck) over the device scenarios")
    rec.out()
    path = os.path.join(raw, "sanitizer.jsonl")
    if not os.path.exists(path):
        skipped = read_text(os.path.join(raw, "sanitizer-skipped.txt"))
        rec.not_run(skipped.strip() if skipped else "no sanitizer.jsonl")
        return
    objs, bad = jsonl(path)
    if bad:
        rec.fail("sanitizer", f"sanitizer.jsonl: {bad} line(s) that are not JSON")
    rows, details = [], []
    for o in objs:
        errors, hazards = o.get("errors"), o.get("hazards")
        ok = o.get("outcome") == "pass" and not errors and not hazards
        dur = o.get("duration_ms")
        rows.append([tick(o.get("scenario")), o.get("tool"), o.get("outcome") or "no result", o.get("phase") or "-",
                     "-" if errors is None else errors, "-" if hazards is None else hazards,
                     num(dur / 1e3) + " s" if isinstance(dur, (int, float)) else "-",
                     tick(o["signature"]) if o.get("signature") else "-", "OK" if ok else "**FAIL**"])
        if not ok:
            what = (f"{o.get('outcome') or 'no result'}"
                    + (f", {errors} errors" if errors else "") + (f", {hazards} hazards" if hazards else ""))
            rec.fail("sanitizer", f"{o.get('tool')} {o.get('scenario')}: {what}")
            details.append((o, what))
    if not rows:
        rec.not_run("sanitizer.jsonl is empty")
        return
    rec.table(["scenario", "tool", "outcome", "phase", "errors", "hazards", "duration", "signature", "result"], rows)
    for o, what in details:
        rec.out(f"{o.get('tool')} {tick(o.get('scenario'))} ({what}), the end of its output:")
        rec.code(o.get("tail") or "(empty)")


# ---------------------------------------------------------------------------------------------

def closing(rec):
    rec.out("## Checks that did not hold")
    rec.out()
    if not rec.failed:
        rec.out("None: every check that ran held.")
    for part, text in rec.failed:
        rec.out(f"- {part}: {text}")
    rec.out()
    if rec.unchecked:
        rec.out("Not measured, so not judged:")
        rec.out()
        for part, text in rec.unchecked:
            rec.out(f"- {part}: {text}")
        rec.out()


def record(raw):
    """The record of RAW_DIR as one Markdown string."""
    rec = Record()
    rec.device = machine(rec, raw)
    body_start = len(rec.lines)
    for part in (tests, verify, benchmarks, overhead, overhead_bench, fidelity, exit_efficiency, rmm, sanitizer):
        try:
            part(rec, raw)
        except Exception as e:  # a part this script could not read must not cost the others
            rec.out(f"**This part could not be read: {type(e).__name__}: {e}**")
            rec.out()
            rec.fail(part.__name__, f"record.py could not read it ({type(e).__name__}: {e})")
    closing(rec)
    summary = (f"**{len(rec.failed)} check(s) did not hold** (listed at the end)." if rec.failed
               else "Every check that ran held.")
    if rec.unchecked:
        summary += f" {len(rec.unchecked)} could not be judged (not measured)."
    rec.lines[body_start:body_start] = [summary, ""]
    return "\n".join(rec.lines).rstrip("\n") + "\n"


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print(__doc__, file=sys.stderr if len(argv) != 2 else sys.stdout)
        return 0 if len(argv) == 2 else 2
    if not os.path.isdir(argv[1]):
        print(f"record.py: {argv[1]} is not a directory", file=sys.stderr)
        return 2
    sys.stdout.write(record(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
