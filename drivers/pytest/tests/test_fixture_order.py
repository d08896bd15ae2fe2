"""faultline_children kills a test's leftover children before any fixture closes what they hold.

Goal: close the reviewers' gap in the anchor. pytest tears fixtures down in reverse setup order, so
a pool fixture that depends on a child-tracking fixture is closed *before* the tracker's teardown
kills the children; when a stuck child still holds an import, the close never returns. Method: the
same small suite twice, run by an inner pytest: a "pool" whose close() blocks while a child holds
it (a pipe whose write end every importer keeps; close reads to EOF: no GPU), a child that hangs
holding it, and a join(timeout) whose result is ignored. With a naive tracker fixture the session
hangs (caught by the inner run's timeout); with faultline_children it finishes, in either fixture
order, and reports the leftover. Then the naive order under an outer timeout: the timeout kills
the child first, so the stuck close returns and the test fails cleanly.
"""

import pytest

from conftest import running

POOL = '''
import multiprocessing, os, time
import pytest

class Pool:
    """Stands in for a device memory pool shared with children: close() returns only once no child
    holds an import. Each importer keeps the write end of a pipe open; close() reads to EOF."""

    def __init__(self):
        self._r, self._w = os.pipe()

    def export(self):
        return self._w

    def close(self):
        os.close(self._w)
        while os.read(self._r, 4096):
            pass
        os.close(self._r)

def child_imports_and_hangs(handle):
    with open("child.pid", "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)  # started slowly, or stuck: it still holds the import

def start_child(pool):
    child = multiprocessing.get_context("fork").Process(target=child_imports_and_hangs, args=(pool.export(),))
    child.start()
    child.join(timeout=0.5)  # the anchor's bug: the timed-out wait is ignored
    return child
'''

NAIVE = (
    POOL
    + '''
from faultline_pytest import track_children

@pytest.fixture
def children():
    with track_children() as tracker:
        yield tracker

@pytest.fixture
def pool(children):  # depends on the tracker: torn down before it
    p = Pool()
    yield p
    p.close()

MARK
def test_ipc(pool):
    start_child(pool)
'''
)

FIXED_POOL_DEPENDS = (
    POOL
    + '''
@pytest.fixture
def pool(faultline_children):  # the same order as the naive suite
    p = Pool()
    yield p
    p.close()

def test_ipc(pool):
    start_child(pool)
'''
)

FIXED_TEST_ORDER = (
    POOL
    + '''
@pytest.fixture
def pool():
    p = Pool()
    yield p
    p.close()

def test_ipc(faultline_children, pool):  # faultline_children set up first, so torn down last
    start_child(pool)
'''
)


def _child_pid(pytester) -> int:
    return int((pytester.path / "child.pid").read_text())


def test_naive_fixture_order_hangs(pytester, run_inner, faultline_children):
    pytester.makepyfile(test_naive=NAIVE.replace("MARK", ""))
    with pytest.raises(pytester.TimeoutExpired):
        run_inner(timeout=4)
    # pytester killed the hung pytest; its stuck child re-parented to this test, which kills it.
    stuck = _child_pid(pytester)
    assert running(stuck), "the child that held the pool should have outlived the hung session"
    assert [c.pid for c in faultline_children.kill_leftovers()] == [stuck]


@pytest.mark.parametrize("suite", [FIXED_POOL_DEPENDS, FIXED_TEST_ORDER], ids=["pool-depends-on-it", "requested-first"])
def test_faultline_children_kills_before_the_pool_closes(pytester, run_inner, suite):
    pytester.makepyfile(test_fixed=suite)
    result = run_inner("-W", "always", timeout=20)
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*FaultlineChildrenWarning: faultline: 1 child process of test_fixed.py::test_ipc still running "
            "at teardown, killed before its fixtures were torn down*",
            f"*pid {_child_pid(pytester)} (*state S*",
        ]
    )
    assert not running(_child_pid(pytester))


def test_leftovers_can_fail_the_test(pytester, run_inner):
    pytester.makepyfile(test_fixed=FIXED_POOL_DEPENDS)
    pytester.makeini("[pytest]\nfaultline_children_leftovers = fail\n")
    result = run_inner(timeout=20)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_ipc*", "*1 child process of test_fixed.py::test_ipc*"])


def test_outer_timeout_rescues_the_naive_order(pytester, run_inner):
    pytester.makepyfile(test_naive=NAIVE.replace("MARK", "@pytest.mark.faultline_timeout(2)"))
    result = run_inner(timeout=20)
    # The call passed; the teardown (the stuck pool close) ran into the timeout.
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*faultline: outer timeout: test_naive.py::test_ipc ran longer than 2 s*",
            "*Killed 1 child process of the test first:*",
            f"*pid {_child_pid(pytester)} *",
            "*[[]main thread[]]*",
            "*in close*",
        ]
    )
    assert not running(_child_pid(pytester))
    assert result.duration < 10


SESSION_SERVER = '''
import subprocess
import pytest

@pytest.fixture(scope="session")
def server():
    proc = subprocess.Popen(["sleep", "60"])  # started lazily, inside the first test's setup
    yield proc
    proc.kill()
    proc.wait()

def test_first(server, faultline_children):
    assert faultline_children.children() == []

def test_second(server):
    assert server.poll() is None, "the first test's teardown killed the session's server"
'''


def test_what_wider_scoped_fixtures_start_is_not_the_tests(pytester, run_inner):
    pytester.makepyfile(test_server=SESSION_SERVER)
    result = run_inner("-W", "error::Warning", timeout=20)
    result.assert_outcomes(passed=2)


def test_the_ini_can_track_every_test(pytester, run_inner):
    pytester.makepyfile(
        test_plain="""
        import subprocess
        def test_leaves_one():
            subprocess.Popen(["sleep", "60"])
        """
    )
    pytester.makeini("[pytest]\nfaultline_track_children = true\nfaultline_children_leftovers = fail\n")
    result = run_inner(timeout=20)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*1 child process of test_plain.py::test_leaves_one still running at teardown*", "*(sleep 60; state S*"])
