"""Fault specs and agent verdicts for a session's own tests (--faultline-faults, faultline_faults).

Goal: a test with a spec runs with faultline's agent in every process it starts (subprocess,
multiprocessing's spawn, its fixtures' processes), never in a session fixture's; a crash of such a
process fails a test that passed otherwise, naming the pid, phase and signature; an exit point that
kills a process is no crash but is reported reached, and a spec item nothing reached warns; a bad
spec or a missing faultline stops the test before it runs; the environment is exactly what it was
once the test is over. Method: inner pytest sessions (subprocesses, the plugin loaded through its
entry point) against the built `faultline` and its crashing test program (skipped when not built),
read back through their output, JUnit properties and files the inner tests write.
"""

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

KEYS = (
    "LD_PRELOAD",
    "FAULTLINE_RUN_DIR",
    "FAULTLINE_FAULTS",
    "FAULTLINE_SEED",
    "FAULTLINE_AGENT_CRASH",
    "FAULTLINE_AGENT_QUIET",
    "CUDA_INJECTION64_PATH",
)


@pytest.fixture
def crasher(faultline_bin):
    program = faultline_bin.parent / "fl_testdata_crash_in_work"
    if not program.is_file():
        pytest.skip(f"{program} is not built (harness/testdata)")
    return program


@pytest.fixture
def agent_lib(faultline_bin):
    return (faultline_bin.parent.parent / "lib" / "libfaultline_agent.so").resolve()


@pytest.fixture
def bare_environment(monkeypatch):
    """The inner session starts without any of the agent's variables."""
    for k in KEYS:
        monkeypatch.delenv(k, raising=False)


def _properties(xml: Path) -> dict:
    """JUnit testcase name -> [(name, value)] (a name may repeat)."""
    return {
        case.get("name"): [(p.get("name"), p.get("value")) for p in case.iter("property")]
        for case in ET.parse(xml).getroot().iter("testcase")
    }


def _one(props, name):
    values = [v for k, v in props if k == name]
    assert len(values) == 1, (name, props)
    return values[0]


def test_a_crashing_subprocess_fails_a_test_that_passed_and_is_named(
    pytester, run_inner, faultline_bin, crasher, bare_environment
):
    pytester.makepyfile(
        test_inner=f"""
        import subprocess

        def test_crash():
            p = subprocess.Popen([{str(crasher)!r}])
            p.wait()
            open("crash.pid", "w").write(str(p.pid))
            assert p.returncode == -11  # the test itself passes: only the agent's report fails it

        def test_clean():
            subprocess.run(["/bin/true"], check=True)
        """
    )
    xml = pytester.path / "junit.xml"
    result = run_inner(f"--faultline-bin={faultline_bin}", "--faultline-faults=exit/end=off", f"--junitxml={xml}")
    result.assert_outcomes(passed=1, failed=1)
    pid = (pytester.path / "crash.pid").read_text()
    result.stdout.fnmatch_lines(
        [
            "faultline: 1 finding in processes started by test_inner.py::test_crash, under --faultline-faults "
            "(faults 'exit/end=off'):",
            f"  crash: pid {pid}, SIGSEGV, phase run: SIGSEGV: crash_in_work_frame | main",
            "agent directory: *faultline-agent*test_inner.py_test_crash",
        ]
    )
    props = _properties(xml)
    crash = props["test_crash"]
    assert _one(crash, "faultline_crashes") == "1"
    assert _one(crash, "faultline_crash") == f"crash: pid {pid}, SIGSEGV, phase run: SIGSEGV: crash_in_work_frame | main"
    assert _one(crash, "faultline_faults") == "exit/end=off"
    assert _one(crash, "faultline_points_reached") == "", "the crasher never got to exit"
    clean = props["test_clean"]
    assert _one(clean, "faultline_crashes") == "0"
    assert int(_one(clean, "faultline_agent_processes")) >= 1, "/bin/true carried the agent"
    assert _one(clean, "faultline_points_reached") == "exit/end"


def test_an_exit_point_that_kills_a_child_is_no_crash_but_is_reported_reached(
    pytester, run_inner, faultline_bin, bare_environment
):
    pytester.makepyfile(
        test_inner="""
        import subprocess, sys
        import pytest

        @pytest.mark.faultline_faults("exit/end=kill;process/start@no-such-program=off")
        def test_kill():
            p = subprocess.run(["python3", "-c", "pass"])
            assert p.returncode == -9  # SIGKILL: no handler runs, no crash report
        """
    )
    xml = pytester.path / "junit.xml"
    result = run_inner(f"--faultline-bin={faultline_bin}", f"--junitxml={xml}", "-W", "always")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*FaultlineFaultsWarning: faultline: * started by test_inner.py::test_kill carried the "
                                 "agent, and none reached these fault points of its spec *: process/start@no-such-program (*"])  # fmt: skip
    props = _properties(xml)["test_kill"]
    assert _one(props, "faultline_points_reached") == "exit/end"
    assert _one(props, "faultline_points_never_reached") == "process/start@no-such-program"
    assert _one(props, "faultline_crashes") == "0"
    assert _one(props, "faultline_faults") == "exit/end=kill;process/start@no-such-program=off"


@pytest.mark.parametrize(
    "how, args, said",
    [
        ("option", ["--faultline-faults=exit/end=fail"], "faultline: error: --faults: exit/end takes off, delay, abort, kill, print or stop, not fail (*"),
        ("marker", [], "faultline: error: --faults: faults spec: column *, found 'fial'*"),
        ("missing binary", ["--faultline-bin=/nonexistent/faultline"], "--faultline-bin=/nonexistent/faultline: not an executable file"),
    ],
)  # fmt: skip
def test_a_spec_that_cannot_be_applied_stops_the_test_before_it_runs(
    pytester, run_inner, faultline_bin, bare_environment, how, args, said
):
    marker = '@pytest.mark.faultline_faults("sim/x=fial")' if how != "option" else ""
    pytester.makepyfile(
        test_inner=f"""
        import pytest

        {marker}
        def test_body():
            open("ran", "w").close()
        """
    )
    if not any(a.startswith("--faultline-bin") for a in args):
        args = [f"--faultline-bin={faultline_bin}", *args]
    result = run_inner(*args)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([f"faultline: test_inner.py::test_body: * cannot be applied, so the test does not run: {said}"])
    assert "During handling" not in result.stdout.str()
    assert not (pytester.path / "ran").exists()


CONFTEST = """
import json, os, subprocess, sys
import pytest

KEYS = {keys!r}
LOG = []

def snap():
    return {{k: os.environ.get(k) for k in KEYS}}

@pytest.fixture(scope="session")
def server():
    LOG.append(["session fixture", snap()])
    yield

@pytest.fixture
def child_env():
    code = "import json, os; print(json.dumps({{k: os.environ.get(k) for k in %r}}))" % (KEYS,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    LOG.append(["fixture's child", json.loads(out)])
    yield
    LOG.append(["finaliser", snap()])

def pytest_runtest_logfinish(nodeid, location):
    LOG.append(["after " + nodeid.split("::")[-1], snap()])

def pytest_sessionfinish(session):
    with open("env.json", "w") as f:
        json.dump(LOG, f)
"""


def test_the_environment_is_set_for_the_test_and_its_fixtures_and_restored_exactly_after(
    pytester, run_inner, faultline_bin, agent_lib, bare_environment, monkeypatch
):
    monkeypatch.setenv("LD_PRELOAD", "libm.so.6")  # a user's preload stays, behind the agent
    monkeypatch.setenv("FAULTLINE_SEED", "7")
    pytester.makeconftest(CONFTEST.format(keys=KEYS))
    pytester.makepyfile(
        test_inner="""
        import os
        import pytest
        from conftest import LOG, snap

        @pytest.mark.faultline_faults("exit/end=off")
        def test_with(server, child_env):
            LOG.append(["test", snap()])
            os.environ["LD_PRELOAD"] = "changed-by-the-test"
            os.environ.pop("FAULTLINE_SEED")

        def test_without():
            LOG.append(["test without", snap()])
        """
    )
    result = run_inner(f"--faultline-bin={faultline_bin}", "--faultline-seed=99")
    result.assert_outcomes(passed=2)
    log = dict((label, env) for label, env in json.loads((pytester.path / "env.json").read_text()))
    before = {k: None for k in KEYS}
    before.update(LD_PRELOAD="libm.so.6", FAULTLINE_SEED="7")
    assert log["session fixture"] == before, "a session fixture's processes never carry a test's agent"
    during = log["test"]
    assert during["LD_PRELOAD"] == f"{agent_lib}:libm.so.6"
    assert Path(during["FAULTLINE_RUN_DIR"]).is_dir() and "faultline-agent" in during["FAULTLINE_RUN_DIR"]
    assert during["FAULTLINE_FAULTS"] == "exit/end=off"
    assert during["FAULTLINE_SEED"] == "99"
    assert (during["FAULTLINE_AGENT_CRASH"], during["FAULTLINE_AGENT_QUIET"]) == ("report", "1")
    assert during["CUDA_INJECTION64_PATH"] is None
    assert log["fixture's child"] == during, "a function-scoped fixture's processes carry it"
    assert log["finaliser"]["FAULTLINE_RUN_DIR"] == during["FAULTLINE_RUN_DIR"], "and its finaliser's"
    assert log["after test_with"] == before, "restored exactly, whatever the test changed"
    assert log["test without"] == before


def test_a_spawned_multiprocessing_child_that_crashes_is_seen(pytester, run_inner, faultline_bin, bare_environment):
    pytester.makepyfile(
        test_inner="""
        import ctypes, multiprocessing
        import pytest

        def crash():
            ctypes.string_at(0)

        @pytest.mark.faultline_faults("exit/end=off")
        def test_spawn():
            child = multiprocessing.get_context("spawn").Process(target=crash)
            child.start()
            child.join(60)
            open("child.pid", "w").write(str(child.pid))
            assert child.exitcode == -11
        """
    )
    result = run_inner(f"--faultline-bin={faultline_bin}", timeout=60)
    result.assert_outcomes(failed=1)
    pid = (pytester.path / "child.pid").read_text()
    result.stdout.fnmatch_lines([f"  crash: pid {pid}, SIGSEGV, phase run: SIGSEGV*"])


def test_late_cuda_calls_fail_the_test_and_the_marker_turns_the_option_off(
    pytester, run_inner, faultline_bin, agent_lib, bare_environment
):
    pytester.makepyfile(
        test_inner=f"""
        import os
        import pytest

        def test_late():
            assert os.environ["CUDA_INJECTION64_PATH"] == {str(agent_lib)!r}
            # What the agent writes for a CUDA call answered cudaErrorCudartUnloading at exit.
            with open(os.path.join(os.environ["FAULTLINE_RUN_DIR"], "late-cuda.%d" % os.getpid()), "w") as f:
                f.write("call cudaFree 4\\n")

        @pytest.mark.faultline_faults(late_cuda=False)
        def test_opted_out():
            assert "FAULTLINE_RUN_DIR" not in os.environ and "CUDA_INJECTION64_PATH" not in os.environ
        """
    )
    result = run_inner(f"--faultline-bin={faultline_bin}", "--faultline-late-cuda")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "faultline: 1 finding in processes started by test_inner.py::test_late, under --faultline-late-cuda "
            "(faults 'none', late CUDA calls checked):",
            "  late CUDA call: cudaFree x1 (pid *), phase exit: late-cuda: cudaFree",
        ]
    )


def test_scenario_tests_are_not_run_under_the_agent(pytester, faultline_bin, bare_environment):
    """--faultline-faults still goes to the catalog's clean variants through `faultline run`, and
    nothing of the agent's reaches their properties."""
    xml = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--faultline-scenarios", "-k", "exit/static-pool", f"--faultline-bin={faultline_bin}",
        "--faultline-backends=sim", "--faultline-repeat=1", "--faultline-seed=1", "--faultline-faults=exit/end=off",
        f"--junitxml={xml}",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    props = dict(next(iter(_properties(xml).values())))
    assert props["faultline_faults"] == "exit/end=off"
    assert "faultline_agent_dir" not in props
