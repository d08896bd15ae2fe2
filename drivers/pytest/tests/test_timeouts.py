"""Outer per-test timeouts and scaled child timeouts.

Goal: a test that runs past its outer timeout fails cleanly and soon (its children killed first,
every thread's stack in the message), whether it is stuck in its body, in a wait on a hanging child,
or in its teardown; a test that cannot be interrupted ends the session instead of wedging it; a
test under a directory that requires an outer timeout and has none fails loudly; timeouts come from
the marker or the ini's directory rules and are scaled for slow environments. Method: unit checks
of the scaling and the rules; inner pytest sessions (in a subprocess, as CI runs them) for what
fires, with timeouts of 1-2 s, checked for their outcome, message, duration and leftover processes.
"""


import pytest

from conftest import running
from faultline_pytest import child_timeout, timeout_scale
from faultline_pytest.timeouts import lookup_rule, parse_duration, parse_timeout_rules, path_matches

# --------------------------------------------------------------------------------------------
# Scaling
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "env, factor",
    [
        ({}, 1.0),
        ({"ASAN_OPTIONS": "detect_leaks=0"}, 3.0),
        ({"LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/libasan.so.8"}, 3.0),
        ({"LD_PRELOAD": "libtsan.so.2", "ASAN_OPTIONS": "x"}, 10.0),  # the largest native factor
        ({"TSAN_OPTIONS": "halt_on_error=1", "CI": "true"}, 15.0),  # native x CI
        ({"LD_PRELOAD": "/usr/libexec/valgrind/vgpreload_memcheck-amd64-linux.so"}, 20.0),
        ({"UBSAN_OPTIONS": "print_stacktrace=1"}, 1.5),
        ({"PYTHONMALLOC": "debug", "CI": "1"}, 3.0),
        ({"PYTHONDEVMODE": "1"}, 1.5),
        ({"CI": "false"}, 1.0),
        ({"FAULTLINE_CHILD_TIMEOUT_SCALE": "0.5", "TSAN_OPTIONS": "x", "CI": "true"}, 0.5),  # the override wins
    ],
)
def test_scale_factors(env, factor):
    scale = timeout_scale(env, mapped="")
    assert scale.factor == factor
    assert bool(scale.reasons) == (factor != 1.0), scale.reasons


def test_a_sanitizer_mapped_into_this_process_counts():
    scale = timeout_scale({}, mapped="/usr/lib/x86_64-linux-gnu/libasan.so.8\n/usr/lib/libc.so.6")
    assert scale.factor == 3.0 and "libasan is mapped" in scale.reasons[0]


@pytest.mark.parametrize("bad", ["0", "-2", "fast", "nan", "inf"])
def test_a_bad_override_is_refused(bad):
    with pytest.raises(ValueError, match="FAULTLINE_CHILD_TIMEOUT_SCALE"):
        timeout_scale({"FAULTLINE_CHILD_TIMEOUT_SCALE": bad})


def test_child_timeout_scales_the_base(monkeypatch):
    monkeypatch.setenv("FAULTLINE_CHILD_TIMEOUT_SCALE", "2.5")
    assert child_timeout(30) == 75.0
    monkeypatch.setenv("FAULTLINE_CHILD_TIMEOUT_SCALE", "1")
    assert child_timeout(0.4) == 0.4
    with pytest.raises(ValueError):
        child_timeout(-1)


# --------------------------------------------------------------------------------------------
# Durations and directory rules
# --------------------------------------------------------------------------------------------


def test_durations():
    assert [parse_duration(t) for t in ("30", "30s", "500ms", "2m", "1.5h", " 7 s ")] == [30, 30, 0.5, 120, 5400, 7]
    for bad in ("", "fast", "-3", "3d"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_rules_match_whole_components_and_globs_and_the_most_specific_wins():
    rules = parse_timeout_rules(["# comment", "tests = 60", "tests/ipc/ = 30s", "tests/*/test_slow*.py = 5m", ""])
    assert [r.pattern for r in rules] == ["tests", "tests/ipc", "tests/*/test_slow*.py"]
    assert lookup_rule(rules, "tests/ipc/test_pool.py").seconds == 30
    assert lookup_rule(rules, "tests/ipc/sub/test_x.py").seconds == 30
    assert lookup_rule(rules, "tests/ipc2/test_pool.py").seconds == 60, "a prefix on whole components only"
    assert lookup_rule(rules, "tests/ipc/test_slow_pool.py").seconds == 300
    assert lookup_rule(rules, "other/test_a.py") is None
    assert path_matches("tests/i*", "tests/ipc/test_pool.py"), "a glob naming a directory covers what is under it"


@pytest.mark.parametrize("line", ["tests", "= 30", "tests = soon"])
def test_malformed_rules_are_refused_with_the_line(line):
    with pytest.raises(ValueError, match="faultline_timeouts"):
        parse_timeout_rules([line])


def test_ini_rules_and_markers_set_each_tests_timeout(pytester, monkeypatch):
    monkeypatch.setenv("FAULTLINE_CHILD_TIMEOUT_SCALE", "2")
    pytester.makeini(
        """
        [pytest]
        faultline_timeouts =
            tests/ipc = 5
            tests/*/test_slow*.py = 9
        """
    )
    pytester.mkpydir("tests")
    ipc = pytester.mkpydir("tests/ipc")
    (ipc / "test_a.py").write_text(
        "import pytest\n"
        "def test_rule(): pass\n"
        "@pytest.mark.faultline_timeout(7)\n"
        "def test_marker(): pass\n"
        "@pytest.mark.faultline_timeout(7, scale=False)\n"
        "def test_unscaled(): pass\n"
        "@pytest.mark.faultline_timeout(0)\n"
        "def test_off(): pass\n"
    )
    (ipc / "test_slow_a.py").write_text("def test_glob(): pass\n")
    (pytester.path / "tests" / "test_none.py").write_text("def test_none(): pass\n")
    reprec = pytester.inline_run("-p", "no:cacheprovider")
    reprec.assertoutcome(passed=6)
    got = {
        r.nodeid.split("::")[-1]: dict(r.user_properties).get("faultline_timeout_s")
        for r in reprec.getreports("pytest_runtest_logreport")
        if r.when == "call"
    }
    assert got == {"test_rule": 10, "test_marker": 14, "test_unscaled": 7, "test_off": None, "test_glob": 18, "test_none": None}


def test_bad_ini_lines_stop_the_session(pytester):
    pytester.makeini("[pytest]\nfaultline_timeouts = tests soon\n")
    pytester.makepyfile("def test_a(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*faultline_timeouts: 'tests soon': expected 'PATH-OR-GLOB = SECONDS'*"])


# --------------------------------------------------------------------------------------------
# The self-check
# --------------------------------------------------------------------------------------------


def test_a_test_without_the_timeout_its_directory_requires_fails_loudly(pytester):
    pytester.makeini(
        """
        [pytest]
        faultline_require_timeout = ipc
        faultline_timeouts = ipc/test_covered.py = 30
        """
    )
    ipc = pytester.mkpydir("ipc")
    (ipc / "test_bare.py").write_text(
        "import pytest\n"
        "def test_forgotten(): pass\n"
        "@pytest.mark.faultline_timeout(10)\n"
        "def test_marked(): pass\n"
        "@pytest.mark.faultline_timeout(0)\n"
        "def test_turned_off(): pass\n"
        "@pytest.mark.faultline_timeout('never')\n"
        "def test_malformed(): pass\n"
    )
    (ipc / "test_covered.py").write_text("def test_by_rule(): pass\n")
    pytester.makepyfile(test_elsewhere="def test_free(): pass")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rE")
    result.assert_outcomes(passed=3, errors=3)
    result.stdout.fnmatch_lines_random(
        [
            "*ERROR at setup of test_forgotten*",
            "*faultline: ipc/test_bare.py::test_forgotten runs under 'ipc', which faultline_require_timeout says needs an "
            "outer timeout, but none applies to it. Add @pytest.mark.faultline_timeout(SECONDS)*",
            "*test_turned_off runs under 'ipc'*(faultline_timeout(0) marker turns it off)*",
            "*test_malformed: 'never' is not a duration*",
            "*faultline: tests without the outer timeout their directory requires*",
        ]
    )


# --------------------------------------------------------------------------------------------
# What fires
# --------------------------------------------------------------------------------------------

HANGS = """
import multiprocessing, os, time
import pytest

def hang():
    time.sleep(600)

@pytest.mark.faultline_timeout(1)
def test_stuck_in_its_body():
    r, w = os.pipe()
    os.read(r, 1)  # nobody will ever write

@pytest.mark.faultline_timeout(1)
def test_waits_for_a_hanging_child():
    child = multiprocessing.get_context("fork").Process(target=hang)
    child.start()
    open("child.pid", "w").write(str(child.pid))
    child.join()  # no timeout at all

@pytest.fixture
def stuck_teardown():
    yield
    r, w = os.pipe()
    os.read(r, 1)

@pytest.mark.faultline_timeout(1)
def test_stuck_in_body_then_teardown(stuck_teardown):
    time.sleep(600)

@pytest.mark.faultline_timeout(1)
def test_swallows_the_interrupt():
    for _ in range(3):
        try:
            time.sleep(0.6)
        except BaseException:
            pass

def test_runs_after_them():
    pass
"""


def test_tests_past_their_timeout_fail_cleanly_and_the_session_goes_on(pytester, run_inner):
    pytester.makepyfile(test_hangs=HANGS)
    result = run_inner("-rA", timeout=40)
    result.assert_outcomes(failed=4, passed=1, errors=1)
    out = result.stdout
    out.fnmatch_lines_random(
        [
            "*outer timeout: test_hangs.py::test_stuck_in_its_body ran longer than 1 s (faultline_timeout(1) marker)*",
            "*test_hangs.py*in test_stuck_in_its_body*",  # its stack, at the os.read
            "*outer timeout: test_hangs.py::test_waits_for_a_hanging_child ran longer than 1 s*",
            "*Killed 1 child process of the test first:*",
            "*ERROR at teardown of test_stuck_in_body_then_teardown*",
            "*was still running 1 s after its 1 s timeout*interrupted again*",
            "*outer timeout: test_hangs.py::test_swallows_the_interrupt ran longer than 1 s*",
        ]
    )
    child = int((pytester.path / "child.pid").read_text())
    assert not running(child)
    # Four timeouts of 1 s, one second interrupt 1 s later, process start: nowhere near a hang.
    assert result.duration < 15


BLOCKED = """
import signal, time
import pytest

@pytest.mark.faultline_timeout(1)
def test_blocks_the_interrupt():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN + 5})
    time.sleep(600)
"""


def test_a_test_that_cannot_be_interrupted_ends_the_session(pytester, run_inner):
    pytester.makepyfile(test_blocked=BLOCKED)
    result = run_inner(timeout=30)
    assert result.ret == 1
    result.stderr.fnmatch_lines(
        [
            "*faultline: outer timeout: test_blocked.py::test_blocks_the_interrupt (1 s, faultline_timeout(1) marker) "
            "could not be ended: the main thread did not take the interrupt within 1 s*",
            "*in test_blocks_the_interrupt*",
            "*ending the test session now (os._exit(1))*",
        ]
    )
    assert result.duration < 10


COEXIST = """
import time
import pytest

@pytest.mark.timeout(30)
@pytest.mark.faultline_timeout(1)
def test_ours_is_shorter():
    time.sleep(600)

@pytest.mark.timeout(1)
@pytest.mark.faultline_timeout(30)
def test_theirs_is_shorter():
    time.sleep(600)

def test_after_both():
    pass
"""


def test_coexists_with_pytest_timeout(pytester, run_inner):
    pytest.importorskip("pytest_timeout")
    pytester.makepyfile(test_both=COEXIST)
    result = run_inner(timeout=30)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines_random(
        ["*outer timeout: test_both.py::test_ours_is_shorter ran longer than 1 s*", "*Timeout (>1.0s) from pytest-timeout*"]
    )
    assert "test_theirs_is_shorter ran longer" not in result.stdout.str()
