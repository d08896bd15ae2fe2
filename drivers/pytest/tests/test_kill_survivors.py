"""kill_survivors: after a wait that may have timed out, kill exactly the processes still running.

Goal: the anchor's parent ignored a timed-out join and went on to close the pool; with
kill_survivors the survivor is dead and reaped before anything else happens, whatever kind of
process it is, and processes that already ended are neither signalled nor reported. Method: real
children of every kind (multiprocessing with each start method, subprocess, a process group leader
with children of its own), checked through their objects and /proc after the call.
"""

import multiprocessing
import signal
import subprocess
import sys

import pytest

import _targets
from conftest import proc_state, running, wait_until
from faultline_pytest import kill_survivors


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_kills_the_child_whose_timed_out_join_was_ignored(method, faultline_children):
    child = multiprocessing.get_context(method).Process(target=_targets.sleep_forever)
    child.start()
    child.join(timeout=0.2)  # the anchor's bug: the result of this wait is never looked at

    assert kill_survivors(child) == [child]
    assert child.exitcode == -signal.SIGKILL
    if method != "forkserver":  # a forkserver child is the forkserver's to reap
        assert proc_state(child.pid) is None, "killed but not reaped"


def test_returns_only_the_processes_still_running(faultline_children):
    ended = subprocess.Popen(["true"])
    ended.wait()
    still_running = subprocess.Popen(["sleep", "60"])
    finished = multiprocessing.get_context("fork").Process(target=_targets.noop)
    finished.start()
    finished.join()
    never_started = multiprocessing.get_context("fork").Process(target=_targets.noop)

    assert kill_survivors(ended, still_running, finished, never_started) == [still_running]
    assert still_running.returncode == -signal.SIGKILL
    assert ended.returncode == 0 and finished.exitcode == 0
    assert kill_survivors(still_running) == []


def test_kills_the_whole_group_of_a_child_that_leads_one(faultline_children):
    leader = subprocess.Popen(
        ["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    grandchild = int(leader.stdout.readline())
    assert running(grandchild)

    assert kill_survivors(leader) == [leader]
    leader.stdout.close()
    assert wait_until(lambda: not running(grandchild)), "the group's other member survived"


def test_kills_only_the_pid_of_a_child_in_our_own_group(faultline_children):
    child = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    grandchild = int(child.stdout.readline())
    child.stdout.close()

    assert kill_survivors(child) == [child]
    assert child.returncode == -signal.SIGKILL
    assert running(grandchild), "a group kill here would have hit the test process's own group"
    # Outside the child's group: the tracker's job, not kill_survivors'.
    assert [c.pid for c in faultline_children.kill_leftovers()] == [grandchild]


def test_grace_gives_sigterm_first(faultline_children):
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    child.stdout.close()

    assert kill_survivors(child, grace_s=5) == [child]
    assert child.returncode == 7


def test_rejects_what_is_not_a_process():
    child = subprocess.Popen(["true"])
    with pytest.raises(TypeError, match=r"kill_survivors\(\*procs\)"):
        kill_survivors([child])
    child.wait()
    with pytest.raises(TypeError, match="multiprocessing.Process or subprocess.Popen"):
        kill_survivors(12345)
