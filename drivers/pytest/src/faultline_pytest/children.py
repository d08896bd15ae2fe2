"""Child processes a test must not leave behind: kill the survivors, track every child a scope makes.

The anchor (a CUDA Python binding's IPC suite that wedged CI runners for hours): a parent shared pool
allocations with a child, waited for it with a timeout, ignored the timed-out wait, and closing the
pool then blocked forever because the child still held an imported handle. The defence is to check
every wait, kill survivors before anything else is closed, and at the end of a test kill every
process the test created and did not end, wherever it went.

    from faultline_pytest import kill_survivors, track_children

    with track_children() as children:          # subreaper for the scope; /proc snapshot taken
        p = multiprocessing.Process(target=work)
        p.start()
        p.join(timeout=child_timeout(30))
        if kill_survivors(p):                   # [p] when it was still running: now dead and reaped
            pytest.fail("child did not finish in time")
    # here every process created inside the block (children, grandchildren that double-forked and
    # were re-parented, daemons) is dead and reaped; processes that existed before are untouched

How descendants are found (Linux): inside the scope the process is a child subreaper
(PR_SET_CHILD_SUBREAPER), so orphans of its descendants re-parent to it instead of init; the scope
walks /proc (ppid links) from its own pid. A process is the scope's when it is a descendant that was
not among the descendants recorded when the scope started (identity = pid + start time from
/proc/PID/stat, so a reused pid is never mistaken for a recorded one) and did not start before the
scope. Subtrees of processes that existed before the scope are left alone (a session fixture's
server may fork while a test runs); multiprocessing's own helpers (the forkserver, the resource
tracker) are never killed but are walked through, because forkserver children hang below them.
Signals go through a pidfd checked against the recorded start time where the kernel has pidfds,
so a pid reused between the scan and the kill is never signalled. A process that leads its own
process group gets its whole group killed (when nothing else is in that group), every other one
its pid. Whatever is killed is reaped: through its `subprocess.Popen` or `multiprocessing.Process`
object when one exists (so `returncode`/`exitcode` read -9, not a made-up 0), by `waitpid` when it
is a plain child or an adopted orphan.

Not covered: processes that are not descendants at all (started through a service manager or a
container daemon), and a descendant of a pre-existing process that was orphaned during the scope
(it re-parents to the scope and is treated as the scope's). Off Linux there is no /proc: only
`kill_survivors` works.
"""

from __future__ import annotations

import ctypes
import errno
import gc
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Set, Tuple

__all__ = ["ChildProcess", "ChildTracker", "kill_survivors", "track_children"]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37


# --------------------------------------------------------------------------------------------
# /proc
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stat:
    pid: int
    ppid: int
    pgid: int
    state: str  # R, S, D, Z, T, ... (proc(5))
    start_ticks: int  # clock ticks after boot

    @property
    def ident(self) -> Tuple[int, int]:
        return (self.pid, self.start_ticks)

    @property
    def dead(self) -> bool:
        return self.state in ("Z", "X", "x")


def _read_stat(pid: int) -> Optional[_Stat]:
    """The process's /proc/PID/stat, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:  # ENOENT/ESRCH: gone; EACCES does not happen for stat
        return None
    # comm (field 2) may hold spaces and parentheses: the fields resume after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state); ppid 4, pgrp 5, starttime 22.
    return _Stat(pid, int(fields[1]), int(fields[2]), fields[0].decode(), int(fields[19]))


def _scan() -> Dict[int, _Stat]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _read_stat(int(name))
            if st is not None:
                table[st.pid] = st
    return table


def _boot_ticks() -> int:
    """Now, in the unit and clock of /proc/PID/stat's start time."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _CLK_TCK)


def _read_text(path: str, limit: int = 4096) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class ChildProcess:
    """A process found by a `ChildTracker`: who it was when it was seen (before it was killed)."""

    pid: int
    ppid: int
    pgid: int
    state: str
    start_ticks: int
    cmdline: str
    wchan: str  # the kernel function it was blocked in ("0" or "" when running)
    age_s: float

    def __str__(self) -> str:
        where = f", blocked in {self.wchan}" if self.wchan and self.wchan != "0" else ""
        return (
            f"pid {self.pid} ({self.cmdline or '?'}; state {self.state}{where}, "
            f"parent {self.ppid}, {self.age_s:.1f} s old)"
        )


def _describe(st: _Stat) -> ChildProcess:
    cmd = _read_text(f"/proc/{st.pid}/cmdline").replace("\0", " ").strip()
    if len(cmd) > 160:
        cmd = cmd[:157] + "..."
    return ChildProcess(
        pid=st.pid,
        ppid=st.ppid,
        pgid=st.pgid,
        state=st.state,
        start_ticks=st.start_ticks,
        cmdline=cmd,
        wchan=_read_text(f"/proc/{st.pid}/wchan").strip(),
        age_s=max(0.0, (_boot_ticks() - st.start_ticks) / _CLK_TCK),
    )


# --------------------------------------------------------------------------------------------
# Signalling one process exactly
# --------------------------------------------------------------------------------------------


def _signal_exact(pid: int, start_ticks: int, sig: int) -> bool:
    """Send sig to pid only if pid is still the process that started at start_ticks.

    With a pidfd the check and the signal refer to the same process: the pidfd is opened first, the
    start time read after, so a pid reused in between shows a different start time and nothing is
    sent. Without pidfds the window is the time between the read and kill(). Returns whether the
    signal was sent.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    send = getattr(signal, "pidfd_send_signal", None)
    if pidfd_open is not None and send is not None:
        try:
            fd = pidfd_open(pid)
        except ProcessLookupError:
            return False
        except OSError as e:
            if e.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
                raise
            fd = None
        if fd is not None:
            try:
                st = _read_stat(pid)
                if st is None or st.start_ticks != start_ticks:
                    return False
                send(fd, sig)
                return True
            except ProcessLookupError:
                return False
            finally:
                os.close(fd)
    st = _read_stat(pid)
    if st is None or st.start_ticks != start_ticks:
        return False
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


# --------------------------------------------------------------------------------------------
# Subreaper (process-wide attribute; reference-counted across trackers)
# --------------------------------------------------------------------------------------------

_subreaper_lock = threading.Lock()
_subreaper_users = 0
_subreaper_before: Optional[bool] = None


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _get_subreaper() -> Optional[bool]:
    if not sys.platform.startswith("linux"):
        return None
    value = ctypes.c_int(0)
    if _libc().prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0) != 0:
        return None
    return bool(value.value)


def _set_subreaper(on: bool) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return _libc().prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def _acquire_subreaper() -> bool:
    global _subreaper_users, _subreaper_before
    with _subreaper_lock:
        if _subreaper_users == 0:
            _subreaper_before = _get_subreaper()
            if _subreaper_before is None or not (_subreaper_before or _set_subreaper(True)):
                return False
        _subreaper_users += 1
        return True


def _release_subreaper() -> None:
    global _subreaper_users
    with _subreaper_lock:
        _subreaper_users -= 1
        if _subreaper_users == 0 and _subreaper_before is False:
            _set_subreaper(False)


def is_subreaper() -> Optional[bool]:
    """Whether this process is a child subreaper now (None where that cannot be asked)."""
    return _get_subreaper()


# --------------------------------------------------------------------------------------------
# Objects that own a child: reap through them so their status is the real one
# --------------------------------------------------------------------------------------------


def _mp_helper_pids() -> Set[int]:
    """multiprocessing's long-lived helpers: never killed (a later Process would need them)."""
    pids = set()
    fs = sys.modules.get("multiprocessing.forkserver")
    if fs is not None:
        pid = getattr(getattr(fs, "_forkserver", None), "_forkserver_pid", None)
        if pid:
            pids.add(pid)
    rt = sys.modules.get("multiprocessing.resource_tracker")
    if rt is not None:
        pid = getattr(getattr(rt, "_resource_tracker", None), "_pid", None)
        if pid:
            pids.add(pid)
    return pids


def _owners() -> Dict[int, object]:
    """pid -> the Popen or multiprocessing Process object of a child not yet reaped (main thread)."""
    owners: Dict[int, object] = {}
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        for p in mp.active_children():  # also reaps, through their objects, children that ended
            owners[p.pid] = p
    sp = sys.modules.get("subprocess")
    if sp is not None:
        for obj in gc.get_objects():
            if isinstance(obj, sp.Popen) and obj.returncode is None and obj.pid:
                owners[obj.pid] = obj
        for obj in getattr(sp, "_active", None) or ():  # collected while running, reaped later
            if obj.returncode is None and obj.pid:
                owners.setdefault(obj.pid, obj)
    return owners


def _poll_owner(obj) -> bool:
    """Reap a child through its object if it has ended; True when it is reaped."""
    if hasattr(obj, "poll") and hasattr(obj, "returncode"):  # subprocess.Popen
        return obj.poll() is not None
    obj.join(0)  # multiprocessing Process
    return obj.exitcode is not None


def _has_zombie_child() -> bool:
    """Whether any child of this process has ended and waits to be reaped (reaps nothing)."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no children at all
        return False


# --------------------------------------------------------------------------------------------
# kill_survivors
# --------------------------------------------------------------------------------------------


def _kind(p) -> str:
    if isinstance(p, subprocess.Popen):
        return "popen"
    mp_process = sys.modules.get("multiprocessing.process")
    if mp_process is not None and isinstance(p, mp_process.BaseProcess):
        return "mp"
    raise TypeError(
        f"kill_survivors() takes multiprocessing.Process or subprocess.Popen objects, got {p!r}"
        + (" (pass a list as kill_survivors(*procs))" if isinstance(p, (list, tuple, set)) else "")
    )


def _alive(p, kind: str) -> bool:
    if kind == "popen":
        return p.poll() is None
    if p.pid is None:  # never started
        return False
    return p.is_alive()


def _kill_group_or_pid(pid: int, sig: int) -> None:
    """Signal pid's whole process group when pid leads its own group, else only pid."""
    try:
        pgid = os.getpgid(pid)
        if pgid == pid and pgid != os.getpgrp():
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def kill_survivors(*processes, grace_s: float = 0.0, timeout_s: float = 10.0) -> list:
    """Kill those of `processes` that are still running and return them (empty: none had to be).

    Each argument is a `multiprocessing.Process` (any start method) or a `subprocess.Popen`. A
    process that leads its own process group (``start_new_session=True``, ``os.setpgrp()``) has its
    whole group killed; any other only itself (its descendants outside the group are
    `track_children`'s job). With `grace_s` > 0 they get SIGTERM first and SIGKILL once `grace_s`
    has passed; else SIGKILL at once. Every killed process is reaped through its object, so
    ``Popen.returncode`` / ``Process.exitcode`` say how it ended; a process still not reaped after
    `timeout_s` (stuck in the kernel, state D) is reported by a RuntimeWarning.

    Call it right after a wait that may have timed out, before anything the children use is
    closed::

        p.join(timeout=child_timeout(30))
        if kill_survivors(p):
            pytest.fail("child still running after its timeout")

    Raises TypeError for any other kind of argument.
    """
    kinds = [_kind(p) for p in processes]
    survivors = [(p, k) for p, k in zip(processes, kinds) if _alive(p, k)]
    first = signal.SIGTERM if grace_s > 0 else signal.SIGKILL
    for p, _ in survivors:
        _kill_group_or_pid(p.pid, first)
    if grace_s > 0:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_alive(p, k) for p, k in survivors):
            time.sleep(0.01)
        for p, k in survivors:
            if _alive(p, k):
                _kill_group_or_pid(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    for p, k in survivors:
        remaining = max(0.0, deadline - time.monotonic())
        if k == "popen":
            try:
                p.wait(timeout=remaining)
            except Exception:  # subprocess.TimeoutExpired
                pass
            stuck = p.returncode is None
        else:
            p.join(remaining)
            stuck = p.exitcode is None
        if stuck:
            warnings.warn(
                f"kill_survivors: pid {p.pid} was killed but has not ended after {timeout_s} s "
                f"(state {getattr(_read_stat(p.pid), 'state', '?')}: stuck in the kernel?)",
                RuntimeWarning,
                stacklevel=2,
            )
    return [p for p, _ in survivors]


# --------------------------------------------------------------------------------------------
# track_children
# --------------------------------------------------------------------------------------------


class ChildTracker:
    """Records every process created while it is open and kills those still running when asked.

    Use it through `track_children()` or the `faultline_children` fixture. Thread safety: `children`
    and `kill_leftovers(reap=False)` may be called from any thread (the outer timeout's watchdog
    does); reaping (`kill_leftovers()` and `close()`) belongs to the thread that waits for children,
    normally the main thread.
    """

    def __init__(self, *, reap_timeout_s: float = 5.0, subreaper: bool = True) -> None:
        self.reap_timeout_s = reap_timeout_s
        self._want_subreaper = subreaper
        self._pid: Optional[int] = None
        self._start_ticks = 0
        self._preexisting: Set[Tuple[int, int]] = set()
        self._killed: Dict[Tuple[int, int], ChildProcess] = {}
        self._lock = threading.Lock()
        self._open = False
        self.subreaper = False
        """Whether orphans re-parent to this process while the tracker is open."""

    # -- scope ------------------------------------------------------------------------------

    def start(self) -> "ChildTracker":
        """Open the scope: become a subreaper and record the descendants that already exist."""
        if self._open:
            raise RuntimeError("ChildTracker already started")
        if not os.path.isdir("/proc/self"):
            raise OSError("track_children needs /proc (Linux)")
        self._pid = os.getpid()
        # One tick of slack: /proc start times are truncated to ticks.
        self._start_ticks = _boot_ticks() - 1
        self.subreaper = self._want_subreaper and _acquire_subreaper()
        table = _scan()
        self._preexisting = {st.ident for st in self._walk(table, include_preexisting=True)}
        self._open = True
        return self

    def close(self, *, kill: bool = True) -> List[ChildProcess]:
        """End the scope: kill what is left (unless kill=False), reap, stop being a subreaper.

        Returns the processes this call killed. Idempotent; a no-op in a forked copy of the process
        that opened it (a fork child running the rest of a ``with`` block must not kill its siblings).
        """
        if not self._open or os.getpid() != self._pid:
            return []
        try:
            if kill:
                killed = self.kill_leftovers()
            else:  # still reap what an outer timeout killed, and orphans that ended here
                killed = []
                self._reap(time.monotonic() + self.reap_timeout_s)
        finally:
            self._open = False
            if self.subreaper:
                _release_subreaper()
                self.subreaper = False
        return killed

    def __enter__(self) -> "ChildTracker":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- queries ----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._open

    @property
    def killed(self) -> List[ChildProcess]:
        """Every process this tracker has killed so far, in order."""
        with self._lock:
            return list(self._killed.values())

    def children(self) -> List[ChildProcess]:
        """Processes created inside the scope and still running (not multiprocessing's helpers)."""
        return [_describe(st) for st in self._mine(_scan()) if not st.dead]

    def _walk(self, table: Dict[int, _Stat], include_preexisting: bool) -> List[_Stat]:
        """Descendants of this process, skipping subtrees of pre-existing ones unless asked."""
        kids: Dict[int, List[_Stat]] = {}
        for st in table.values():
            kids.setdefault(st.ppid, []).append(st)
        helpers = _mp_helper_pids()
        out, stack, seen = [], [self._pid], set()
        while stack:
            for st in kids.get(stack.pop(), ()):
                if st.pid in seen:
                    continue
                seen.add(st.pid)
                if st.pid in helpers:  # walk through, never report
                    stack.append(st.pid)
                    if include_preexisting:
                        out.append(st)
                    continue
                if not include_preexisting and (
                    st.ident in self._preexisting or st.start_ticks < self._start_ticks
                ):
                    continue  # not ours, nor is anything below it
                out.append(st)
                stack.append(st.pid)
        return out

    def _mine(self, table: Dict[int, _Stat]) -> List[_Stat]:
        with self._lock:
            return self._walk(table, include_preexisting=False)

    # -- killing ----------------------------------------------------------------------------

    def kill_leftovers(self, *, reap: bool = True, grace_s: float = 0.0) -> List[ChildProcess]:
        """Kill every process created in the scope that is still running; return those killed.

        Repeats until none is left (a process forking while it is killed is caught on the next
        round; orphans re-parent here on the way) or `reap_timeout_s` has passed. With reap=True
        (main thread) the killed processes are then reaped; with reap=False this only waits until
        they are dead (zombies) and leaves the reaping to a later `kill_leftovers()` or `close()`,
        which is what another thread must do: reaping a child whose owner is blocked in
        ``waitpid`` would take its status away.
        """
        if not self._open:
            return []
        deadline = time.monotonic() + self.reap_timeout_s
        killed: List[ChildProcess] = []
        sig = signal.SIGTERM if grace_s > 0 else signal.SIGKILL
        term_deadline = time.monotonic() + grace_s
        while True:
            table = _scan()
            targets = [st for st in self._mine(table) if not st.dead]
            if not targets:
                break
            if sig == signal.SIGTERM and time.monotonic() >= term_deadline:
                sig = signal.SIGKILL
            with self._lock:
                fresh = [st for st in targets if st.ident not in self._killed]
                for st in fresh:
                    info = _describe(st)
                    self._killed[st.ident] = info
                    killed.append(info)
            self._signal(targets, table, sig)
            if time.monotonic() >= deadline:
                break
            # Give the kernel a moment to end them (and re-parent their orphans) before looking again.
            time.sleep(0.005 if sig == signal.SIGKILL else 0.05)
        if reap:
            self._reap(deadline)
        return killed

    def _signal(self, targets: List[_Stat], table: Dict[int, _Stat], sig: int) -> None:
        ours = {st.ident for st in targets}
        own_group = os.getpgrp()
        for st in targets:
            if st.pgid == st.pid and st.pgid != own_group:
                members = [m for m in table.values() if m.pgid == st.pgid]
                # killpg is atomic against forks inside the group; only used when every member is
                # one of ours (never a pre-existing process that joined the group).
                if all(m.ident in ours or m.dead for m in members):
                    if _signal_exact(st.pid, st.start_ticks, 0):  # leader still the recorded one
                        try:
                            os.killpg(st.pgid, sig)
                        except ProcessLookupError:
                            pass
        for st in targets:
            _signal_exact(st.pid, st.start_ticks, sig)

    def _reap(self, deadline: float) -> None:
        """Reap this scope's dead children (through their objects when they have one) and wait,
        until `deadline`, for every process this tracker killed to be gone."""
        with self._lock:
            if not self._killed and not _has_zombie_child():
                return  # the common case: nothing killed, nothing to reap, no scan
        owners = None
        while True:
            table = _scan()
            with self._lock:
                killed = set(self._killed)
            pending = False
            for st in self._mine(table):
                if not st.dead:
                    pending = pending or st.ident in killed
                elif st.ppid == self._pid:
                    if owners is None:
                        owners = _owners()
                    owner = owners.get(st.pid)
                    if owner is not None:
                        _poll_owner(owner)
                    else:  # a plain fork, or an orphan adopted as subreaper: nobody else will
                        try:
                            os.waitpid(st.pid, os.WNOHANG)
                        except ChildProcessError:
                            pass
                    pending = True  # look again: its own orphans may re-parent here
                else:
                    # A dead grandchild: its parent reaps it, or, when the parent is one we killed,
                    # it re-parents here shortly.
                    parent = table.get(st.ppid)
                    pending = pending or (parent is not None and parent.ident in killed)
            if not pending or time.monotonic() >= deadline:
                return
            time.sleep(0.005)

    def __repr__(self) -> str:
        state = "open" if self._open else "closed"
        return f"<ChildTracker {state} pid={self._pid} subreaper={self.subreaper} killed={len(self._killed)}>"


def track_children(*, reap_timeout_s: float = 5.0, subreaper: bool = True) -> ChildTracker:
    """A context manager recording every child process created inside it; kills leftovers on exit.

    Covers multiprocessing (fork, spawn, forkserver), subprocess, os.fork/os.system and what those
    start in turn, including grandchildren that double-forked away from their parent. On exit every
    such process still running is killed (whole process group where it leads one) and reaped;
    `ChildTracker.killed` lists them. Processes that existed before the block, and anything they
    start, are never touched. Linux only (it walks /proc); raises OSError elsewhere.

        with track_children() as tracker:
            run_the_suite_step()
        assert not tracker.killed, tracker.killed
    """
    return ChildTracker(reap_timeout_s=reap_timeout_s, subreaper=subreaper)
