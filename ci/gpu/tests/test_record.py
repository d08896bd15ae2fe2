"""ci/gpu/record.py over a RAW_DIR built from the fixtures in data/ (data/README.md says where
each comes from), and over an empty one."""
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(GPU, file))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


record = _load("record", "record.py")


@pytest.fixture
def raw(tmp_path):
    d = tmp_path / "raw"
    shutil.copytree(DATA, d)
    return d


def section(md, title):
    """The text of the `## title...` section (up to the next `## `)."""
    m = re.search(rf"^## {re.escape(title)}.*?(?=^## |\Z)", md, re.M | re.S)
    assert m, f"no section {title!r} in:\n{md}"
    return m.group(0)


def sub(md, title):
    """The text of the `### title...` subsection (up to the next heading)."""
    m = re.search(rf"^### {re.escape(title)}.*?(?=^##|\Z)", md, re.M | re.S)
    assert m, f"no subsection {title!r} in:\n{md}"
    return m.group(0)


def row(text, first_cells):
    """The table row whose first cells are `first_cells`, as a list of cells."""
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[:len(first_cells)] == first_cells:
                return cells
    raise AssertionError(f"no row {first_cells} in:\n{text}")


def closing(md):
    return section(md, "Checks that did not hold")


def test_full_record_has_every_table_and_the_right_verdicts(raw):
    md = record.record(str(raw))

    assert md.startswith("# GPU check record, 2026-11-24")
    assert "NVIDIA H100 80GB HBM3, driver 580.159.04, 81559 MiB" in md
    assert "| commit | 1b16919 |" in md

    tests = section(md, "Unit tests")
    assert row(tests, ["alloc_test"])[1:5] == ["3", "3", "0", "0"]
    cb = row(tests, ["cuda_backend_test"])
    assert cb[1:5] == ["27", "10", "0", "17"]
    # Seventeen skips with one reason, collapsed into one entry (the reason from the console).
    assert cb[5].startswith("17× no CUDA device answers")
    ex = row(tests, ["example_test"])
    assert ex[1:5] == ["3", "1", "1", "1"]
    assert ex[6] == "`pool_resource.frees_on_the_allocating_stream` (t.cc:3)"
    assert "1× no CUDA device answers: unavailable" in ex[5]

    verify = section(md, "faultline verify")
    assert row(verify, ["exit/static-pool", "bug/alloc/no-exit-guard"])[-1] == "OK"
    assert row(verify, ["exit/static-pool", "clean"])[3] == "0/3 failures"
    bad = row(verify, ["ipc/slow-child", "clean"])
    assert bad[-1] == "**FAIL**" and bad[4] == "hang 3"
    assert row(verify, ["ipc/slow-child", "bug/ipc/unchecked-join"])[-1] == "OK"
    assert "faultline run ipc/slow-child --seed 1795523144523 --repeat 1 --timeout 300ms" in verify
    assert "top signature `hang`" in verify

    bench = section(md, "Benchmarks")
    # The alloc fixture ran on the sim: the record says so, and the sim's "cudaMalloc" is no slower
    # than the pool, so the 100x target is NOT MET; RMM's pool skipped there: not measured.
    assert "Backend: sim, not cuda" in bench
    one = row(sub(md, "Allocation pairs"), ["1"])
    assert one[8] == "**NOT MET**"
    assert one[9].startswith("not measured (no CUDA device (backend sim): rmm_pool needs cuda")
    assert row(bench, ["4"])[8] == "**NOT MET**"
    rnd = row(sub(md, "RMM's random"), ["1 MiB", "1"])
    assert rnd[3] == "error [1]"
    assert "[1] no CUDA device (backend sim): rmm_pool needs cuda" in bench
    # Context epoch: every context_epoch_bench case skipped (no GPU), the backend's from alloc_bench.
    assert "alloc_bench `bm_context_epoch` (backend sim)" in bench
    assert "skipped: unavailable: cudaMalloc of 256 bytes" in bench
    # Accounting (an H100 record): 8 processes with the watcher p99/p50 4.16 > 3, the floor 5.35.
    acc = row(bench, ["region charge", "8", "yes"])
    assert acc[3:6] == ["488", "2,028", "4.16"]
    assert "with the watcher: 4.16, **NOT MET**" in bench
    assert "fetch_add on one shared line, 8 processes): 5.35" in bench
    # Registry: save vs bare copy, and the unregister target.
    reg = row(sub(md, "Registry"), ["1 MiB"])
    assert reg[3] == "0.36" and reg[4] == "sim"
    assert row(sub(md, "Registry"), ["16"])[-1] == "MET"
    # Fault points.
    assert row(bench, ["`BM_point_disabled`"])[3].endswith("×")

    over = section(md, "Harness overhead")
    assert row(over, ["`faultline exec` (agent preloaded)"])[1:] == ["6.50", "5.25", "5.20×"]

    ex = section(md, "Exit races")
    assert row(ex, ["`exit/static-pool@bug/alloc/no-exit-guard`"])[1:] == ["**1** (1, 2, 1)", "**1** (1, 1, 1)"]
    assert row(ex, ["`fl_cuda_exit_race`"])[1:] == ["**> 200** (7, > 200, > 200)", "**1** (1, 2, 1)"]
    assert row(ex, ["`exit/early-reset@bug/alloc/no-epoch-guard`"])[1] == "**no result** (?)"

    rmm = section(md, "RMM clients")
    r = row(rmm, ["`rmm_client_2604`"])
    assert r[1:4] == ["30", "pass 9, crash 21", "70.0% (52.1–83.3%)"]
    assert r[4].startswith("18× crash/exit `SIGSEGV: rmm::mr::detail::stream_ordered_memory_resource")
    assert row(rmm, ["`rmm_client_2606`"])[4] == "-"
    # The quoted stack: the crashing thread (LWP 4127), not the first one in the file, <= 15 frames.
    quoted = re.search(r"```\n(.*?)```", rmm, re.S).group(1).splitlines()
    assert quoted[0].startswith("#0  0x00007f3a1b4c3e10 in ?? () from /lib/x86_64-linux-gnu/libcuda.so.1")
    assert any("stream_ordered_memory_resource" in f and "release()" in f for f in quoted)
    assert 1 < len(quoted) <= 15
    assert "epoll_wait" not in rmm

    san = section(md, "compute-sanitizer")
    assert row(san, ["`exit/static-pool`", "memcheck"])[-1] == "OK"
    assert row(san, ["`registry/unregister-while-saving`", "memcheck"])[-1] == "**FAIL**"
    assert "ERROR SUMMARY: 2 errors" in san

    end = closing(md)
    for expected in ("tests: example_test: pool_resource.frees_on_the_allocating_stream failed",
                     "verify: ipc/slow-child clean: no-failures did not hold",
                     "alloc: pool ≥ 100× faster than cudaMalloc/cudaFree, 1 stream",
                     "alloc: pool ≥ 100× faster than cudaMalloc/cudaFree, 4 streams",
                     "accounting: contended charge p99/p50 4.16 > 3",
                     "exit: exit/early-reset@bug/alloc/no-epoch-guard (without the amplifier): 1 of 1 campaigns gave no result",
                     "sanitizer: memcheck registry/unregister-while-saving: fail, 2 errors"):
        assert expected in end
    assert "Not measured, so not judged" in end and "pool no slower than RMM's pool, 1 stream" in end
    # The top of the record counts them.
    assert re.search(r"\*\*\d+ check\(s\) did not hold\*\*", md)


def _as_gpu_run(doc):
    """The sim alloc fixture turned into what a GPU with RMM would show: cudaMalloc 200x the pool,
    RMM's pool 1.2x the pool, every label cuda."""
    doc = copy.deepcopy(doc)
    out = []
    for b in doc["benchmarks"]:
        if "rmm_pool" in b["name"] or "/device" in b["name"]:
            continue
        b["label"] = "cuda"
        out.append(b)
        if "/pool" in b["name"]:
            for kind, factor in (("device", 200), ("rmm_pool", 1.2)):
                r = copy.deepcopy(b)
                for k in ("name", "run_name"):
                    r[k] = r[k].replace("/pool", "/" + kind)
                if r.get("aggregate_name") in ("mean", "median", "stddev"):
                    r["real_time"] *= factor
                out.append(r)
    doc["benchmarks"] = out
    return doc


def test_targets_met_read_met(raw):
    path = raw / "bench" / "alloc_bench.json"
    path.write_text(json.dumps(_as_gpu_run(json.loads(path.read_text()))))
    md = record.record(str(raw))
    bench = section(md, "Benchmarks")
    assert "Backend:" not in bench
    for streams in ("1", "4"):
        cells = row(bench, [streams])
        assert cells[5] == "200.00×" and cells[7] == "1.20×"
        assert cells[8] == "MET" and cells[9] == "MET"
    assert row(bench, ["1 MiB", "1"])[-1] == "MET"
    end = closing(md)
    assert "alloc:" not in end
    assert "pool no slower than RMM's pool" not in end


def test_pool_slower_than_rmm_is_not_met(raw):
    path = raw / "bench" / "alloc_bench.json"
    doc = _as_gpu_run(json.loads(path.read_text()))
    for b in doc["benchmarks"]:
        if "rmm_pool" in b["name"] and b.get("aggregate_name") in ("mean", "median", "stddev"):
            b["real_time"] /= 1.2 * 1.5   # RMM's pool now 1.5x faster than the pool
    path.write_text(json.dumps(doc))
    md = record.record(str(raw))
    assert row(section(md, "Benchmarks"), ["1"])[9] == "**NOT MET**"
    assert "alloc: pool no slower than RMM's pool, 1 stream: 0.67×" in closing(md)


def test_a_benchmark_cut_short_is_read_up_to_its_last_entry_and_reported(raw):
    path = raw / "bench" / "alloc_bench.json"
    text = path.read_text()
    path.write_text(text[: text.index('"bm_random/async/max_mib:1/streams:1/real_time_median"')])
    (raw / "bench" / "alloc_bench.txt").write_text("...\nexit status 139\n")
    md = record.record(str(raw))
    bench = section(md, "Benchmarks")
    assert "bench/alloc_bench: exit status 139 (SIGSEGV); read up to its last whole entry" in bench
    assert row(bench, ["1"])[1].startswith("105")    # the pairs before the cut are there
    assert "alloc_bench: bench/alloc_bench: exit status 139" in closing(md)


def test_a_test_binary_that_wrote_no_json_is_a_failure(raw):
    (raw / "tests" / "ipc_test.txt").write_text("[ RUN      ] ipc.x\nSegmentation fault\n")
    (raw / "tests" / "registry_test.missing").write_text("missing /x/bin/registry_test\n")
    md = record.record(str(raw))
    tests = section(md, "Unit tests")
    assert "no JSON" in row(tests, ["ipc_test"])[5]
    assert "Segmentation fault" in tests
    assert row(tests, ["registry_test"])[5] == "binary missing"
    assert "tests: ipc_test: no test report" in closing(md)


def test_an_empty_raw_dir_gives_not_run_sections(tmp_path):
    md = record.record(str(tmp_path))
    for title in ("Unit tests", "faultline verify", "Benchmarks", "Harness overhead", "Exit races",
                  "RMM clients", "compute-sanitizer"):
        assert "Not run (" in section(md, title), title
    assert "None: every check that ran held." in closing(md)


def test_skipped_parts_say_why(tmp_path):
    (tmp_path / "rmm-skipped.txt").write_text("no RMM clients in /x/bin (ci/gpu/rmm-clients.sh builds them): part rmm skipped\n")
    (tmp_path / "sanitizer-skipped.txt").write_text("compute-sanitizer not found: part sanitizer skipped\n")
    (tmp_path / "bench").mkdir()
    md = record.record(str(tmp_path))
    assert "Not run (no RMM clients in /x/bin" in section(md, "RMM clients")
    assert "Not run (compute-sanitizer not found" in section(md, "compute-sanitizer")
    assert "Not run (no bench/alloc_bench.json)" in section(md, "Benchmarks")


def test_command_lines(raw):
    r = subprocess.run([sys.executable, os.path.join(GPU, "record.py"), str(raw)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("# GPU check record")
    assert subprocess.run([sys.executable, os.path.join(GPU, "record.py")], capture_output=True).returncode == 2
    # alloc-ratios.py, refactored for record.py, keeps its command line.
    r = subprocess.run([sys.executable, os.path.join(GPU, "alloc-ratios.py"), str(raw / "bench" / "alloc_bench.json"),
                        "--markdown"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| pairs | - | 1 |" in r.stdout
    assert "skipped: pairs - 1 streams rmm_pool: no CUDA device" in r.stderr


def test_a_random_case_where_the_pool_fails_is_a_failed_check(raw):
    path = raw / "bench" / "alloc_bench.json"
    doc = json.loads(path.read_text())
    name = "bm_random/pool/max_mib:1/streams:4/real_time"
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["run_name"] != name] + [
        {"name": name, "run_name": name, "run_type": "iteration", "error_occurred": True,
         "error_message": "out_of_memory: pool_resource: upstream refused every growth", "real_time": 0,
         "time_unit": "ms"}]
    path.write_text(json.dumps(doc))
    md = record.record(str(raw))
    assert row(sub(md, "RMM's random"), ["1 MiB", "4"])[-1] == "**pool failed**"
    assert "alloc: random 1 MiB, 4 streams: the pool failed: out_of_memory: pool_resource" in closing(md)


def test_overhead_beside_loops_is_judged_against_both_targets(raw):
    # data/overhead-j1.json and -j16.json: ci/overhead.py on an H200 machine (16 cores), 2026-11-25.
    md = record.record(str(raw))
    text = section(md, "Harness overhead beside shell loops")
    assert row(text, ["faultline"])[1] == "2.16"
    assert "<= 0.5 ms per run beside the loop: NOT MET (1.60 ms)" in text
    assert "throughput >= 0.8× the loops': NOT MET (0.04×)" in text
    assert "--jobs 1: 1.60 ms per run over the shell loop" in closing(md)
    # A faster harness meets the target and leaves the closing list.
    j1 = json.loads((raw / "overhead-j1.json").read_text())
    for r in j1["rows"]:
        if r["arm"] == "faultline":
            r["overhead_ms"] = 0.3
    (raw / "overhead-j1.json").write_text(json.dumps(j1))
    md = record.record(str(raw))
    assert "beside the loop: MET (0.300 ms)" in section(md, "Harness overhead beside shell loops")
    assert "--jobs 1:" not in closing(md)


def test_fidelity_rows_outside_the_pipe_interval_are_failed_checks(raw):
    # data/fidelity.json: ci/fidelity.py on an H200 machine at --jobs 6, 2026-11-25: all faithful.
    md = record.record(str(raw))
    text = section(md, "Fidelity")
    assert row(text, ["`rmm_client_2604 --streams 4 --detached-worker`", "default"])[2:] == [
        "20/60", "33.3% (22.7–45.9%)", "", "yes"]  # (made before the exact test: no p)
    assert "fidelity" not in closing(md)
    f = json.loads((raw / "fidelity.json").read_text())
    for r in f["rows"]:
        if r["mode"] == "default" and r["program"].startswith("rmm_client"):
            r["failures"], r["rate"], r["inside_reference_interval"] = 5, 5 / 60, False
    (raw / "fidelity.json").write_text(json.dumps(f))
    md = record.record(str(raw))
    assert "**NO**" in section(md, "Fidelity")
    assert "under default: 5/60, outside the bare-pipe interval" in closing(md)


def test_fidelity_rows_are_judged_by_the_exact_test_where_the_record_has_one(raw):
    # A rate just outside the reference's interval but alike by the test passes; one that differs
    # by the test fails, whatever the interval says.
    f = json.loads((raw / "fidelity.json").read_text())
    for r in f["rows"]:
        if r["mode"] == "default" and r["program"].startswith("rmm_client"):
            r["inside_reference_interval"], r["p_value"], r["faithful"] = False, 0.45, True
    (raw / "fidelity.json").write_text(json.dumps(f))
    md = record.record(str(raw))
    assert row(section(md, "Fidelity"), ["`rmm_client_2604 --streams 4 --detached-worker`", "default"])[4:] == [
        "0.45", "yes"]
    assert "fidelity" not in closing(md)
    for r in f["rows"]:
        if r["mode"] == "default" and r["program"].startswith("rmm_client"):
            r["inside_reference_interval"], r["p_value"], r["faithful"] = True, 0.01, False
    (raw / "fidelity.json").write_text(json.dumps(f))
    md = record.record(str(raw))
    assert "under default: 20/60, differs from bare-pipe (p = 0.01)" in closing(md)
