"""The outer per-test timeout: a watchdog thread that ends a stuck test cleanly.

When a test runs past its outer timeout the watchdog thread, in this order:

1. dumps the stacks of every thread (faulthandler), marking the main thread: where the test is
   stuck (taken after the next step, it would show where the test went once unblocked);
2. kills the processes the test created (its `ChildTracker`), because a stuck child is the usual
   reason the test is stuck (a pool close waiting for an importer, a join without a timeout);
3. interrupts the main thread with a real-time signal (SIGRTMIN+5, so that it coexists with
   pytest-timeout's SIGALRM and with the SIGUSR1/SIGUSR2 handlers suites install), whose handler
   raises `OuterTimeoutError` (a `pytest.fail` exception: `except Exception` does not swallow it)
   inside whatever the test is blocked in. The handler raises only while the main thread is inside
   one of pytest's setup/call/teardown implementations, where pytest turns the exception into a
   failure of that phase (never inside pluggy's glue, where it would skip the item's teardown),
   and not at an instruction without a line number (pytest cannot format that traceback);
   elsewhere it leaves the interrupt pending and the watchdog sends it again 50 ms later (after one
   second of that it raises outside a phase too). A test that ends before taking the interrupt
   (killing its children unblocked it) still fails: its report carries the timeout.

If the test has not ended `grace_s` after the interrupt was taken (its teardown is stuck too), the
watchdog kills the children again and sends a second interrupt; `grace_s` after that, or when an
interrupt is not taken within `grace_s` at all (the main thread is stuck in C with the signal
blocked), it writes the stacks to the real stderr and ends the whole session with os._exit(1): a
lost session is better than a runner wedged for hours.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, List, Optional

import pytest

__all__ = ["OuterTimeout", "OuterTimeoutError", "Watchdog", "INTERRUPT_SIGNAL", "watchdog"]

INTERRUPT_SIGNAL: Optional[int] = (signal.SIGRTMIN + 5) if hasattr(signal, "SIGRTMIN") else None

RETRY_S = 0.05  # resend an interrupt the main thread has not taken
FORCE_AFTER_S = 1.0  # then raise wherever the main thread is
HARD_EXIT_STATUS = 1

# The real stderr, saved before pytest's capture replaces fd 2 (entry points load before it starts).
try:
    _REAL_STDERR = os.dup(2)
except OSError:  # no fd 2
    _REAL_STDERR = -1


class OuterTimeoutError(pytest.fail.Exception):  # type: ignore[misc,name-defined]
    """Raised in the main thread when a test runs past its outer timeout."""


class OuterTimeout:
    """One armed outer timeout: one test, `seconds` long, counted from construction.

    `kill_children` (called from the watchdog thread) kills the test's children and returns what it
    killed; `child_stacks`, called just before, returns the stacks of those that carry faultline's
    agent (a test with a fault spec), or "". The times `expired_at` and `delivered_at` (time.monotonic()) are kept for measurement.
    """

    def __init__(
        self,
        label: str,
        seconds: float,
        source: str,
        *,
        kill_children: Optional[Callable[[], list]] = None,
        child_stacks: Optional[Callable[[], str]] = None,
        grace_s: Optional[float] = None,
    ) -> None:
        self.label = label
        self.seconds = seconds
        self.source = source
        self.kill_children = kill_children
        self.child_stacks = child_stacks
        self.grace_s = grace_s if grace_s is not None else max(1.0, 0.1 * seconds)
        self.started = time.monotonic()
        self.due = self.started + seconds
        self.main_ident = threading.main_thread().ident
        self.expired_at: Optional[float] = None
        self.delivered_at: Optional[float] = None
        self.killed: list = []
        self.interrupts = 0  # messages handed to the main thread so far
        self.pending: Optional[str] = None  # a message not yet raised in the main thread
        self.pending_since = 0.0
        self.message: Optional[str] = None  # what the test's report must say once expired
        self.message_final = False  # children killed and stacks dumped: the message is complete
        self.reported = False  # a failed report of the test carries it
        self.done = False

    @property
    def expired(self) -> bool:
        return self.expired_at is not None


def _runner_codes() -> frozenset:
    try:
        from _pytest import runner
    except ImportError:  # pragma: no cover - pytest always has it today
        return frozenset()
    names = ("pytest_runtest_setup", "pytest_runtest_call", "pytest_runtest_teardown")
    return frozenset(getattr(runner, n).__code__ for n in names if hasattr(runner, n))


def _deliverable(frame, codes: frozenset, forced: bool) -> bool:
    """Whether an exception raised at `frame` ends up where pytest reports it.

    It must be inside one of pytest's setup/call/teardown implementations (unless `forced`), and no
    frame on the way may sit at an instruction without a line number (compiler-generated cleanup
    code since Python 3.11): pytest cannot format such a traceback entry and stops the session with
    an internal error.
    """
    in_phase = forced or not codes
    while frame is not None:
        if frame.f_lineno is None:
            return False
        if frame.f_code in codes:
            in_phase = True
        frame = frame.f_back
    return in_phase


def dump_stacks(main_ident: Optional[int]) -> str:
    """Every thread's Python stack (faulthandler's format), the main thread marked."""
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        text = f.read()
    # Leave out the watchdog's own stack ("Current thread ..." is the thread dumping), and below the
    # test's own frames the frames of pytest and pluggy, which every test shares.
    blocks = []
    for block in text.strip().split("\n\n"):
        if block.startswith("Current thread"):
            continue
        lines = block.splitlines()
        for i, line in enumerate(lines[2:], start=2):
            if "/_pytest/" in line or "/pluggy/" in line:
                lines[i:] = ["  ... (pytest)"]
                break
        blocks.append("\n".join(lines))
    text = "\n\n".join(blocks)
    if main_ident is not None:
        tag = f"Thread 0x{main_ident:0{16 if sys.maxsize > 2**32 else 8}x}"
        text = text.replace(tag + " (most recent", tag + " [main thread] (most recent")
    return text.rstrip()


class Watchdog:
    """The thread that watches every armed `OuterTimeout` (one per process, shared by sessions)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._entries: List[OuterTimeout] = []
        self._thread: Optional[threading.Thread] = None
        self._codes = _runner_codes()
        self._previous_handler = None
        self._installs = 0
        self._stop = False  # the thread is to end (a fork is about to happen)
        self._restart = False  # the signal handler is to start it again

    # -- main thread ------------------------------------------------------------------------

    def install(self) -> bool:
        """Install the interrupt's handler (main thread only); False where signals cannot be used."""
        if INTERRUPT_SIGNAL is None or threading.current_thread() is not threading.main_thread():
            return False
        if self._installs == 0:
            self._previous_handler = signal.signal(INTERRUPT_SIGNAL, self._on_signal)
        self._installs += 1
        return True

    def uninstall(self) -> None:
        if self._installs == 0:
            return
        self._installs -= 1
        if self._installs == 0:
            signal.signal(INTERRUPT_SIGNAL, self._previous_handler or signal.SIG_DFL)

    @property
    def can_interrupt(self) -> bool:
        return self._installs > 0

    def arm(self, entry: OuterTimeout) -> None:
        with self._cond:
            self._entries.append(entry)
            self._ensure_thread()
            self._cond.notify()

    def _ensure_thread(self) -> None:  # with self._cond held
        if self._entries and not self._stop and (self._thread is None or not self._thread.is_alive()):
            self._thread = threading.Thread(target=self._run, name="faultline-watchdog", daemon=True)
            self._thread.start()

    # -- fork ---------------------------------------------------------------------------------
    # The thread exists only while a test is armed, and not across a fork: a process forking while
    # another thread runs risks a child deadlocked on a lock that thread held, and Python 3.12+
    # warns about it (DeprecationWarning), which suites with -W error turn into failures. The
    # thread ends before every os.fork() and starts again after it: from the signal handler,
    # because Python 3.13 counts the threads after the at-fork hooks have run.

    def _before_fork(self) -> None:
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        thread.join()

    def _after_fork_in_parent(self) -> None:
        with self._cond:
            if not self._stop:
                return
            self._stop = False
            if not self._entries:
                return
            if self.can_interrupt and threading.current_thread() is threading.main_thread():
                self._restart = True
            else:
                self._ensure_thread()
                return
        signal.pthread_kill(threading.main_thread().ident, INTERRUPT_SIGNAL)

    def _after_fork_in_child(self) -> None:
        # The child is a copy running the test's code, not a test session: nothing to watch.
        self._cond = threading.Condition()
        self._entries = []
        self._thread = None
        self._stop = self._restart = False

    def disarm(self, entry: OuterTimeout) -> None:
        with self._cond:
            entry.done = True
            if entry in self._entries:
                self._entries.remove(entry)
            self._cond.notify()

    def _on_signal(self, signum, frame) -> None:
        __tracebackhide__ = True
        if self._restart:
            with self._cond:
                self._restart = False
                self._ensure_thread()
        message = self._take(frame)
        if message is not None:
            raise OuterTimeoutError(message, pytrace=True)

    def _take(self, frame) -> Optional[str]:
        with self._cond:
            for entry in reversed(self._entries):  # innermost (nested sessions) first
                if entry.pending is None:
                    continue
                forced = time.monotonic() - entry.pending_since >= FORCE_AFTER_S
                if not _deliverable(frame, self._codes, forced):
                    return None
                message, entry.pending = entry.pending, None
                entry.delivered_at = time.monotonic()
                entry.due = entry.delivered_at + entry.grace_s
                self._cond.notify()
                return message
        return None

    def report_message(self, entry: OuterTimeout) -> Optional[str]:
        """For a test report: the expiry message (None before expiry); any interrupt still pending
        is dropped, the report carries it instead (the test may have ended once its children died,
        or swallowed the exception)."""
        with self._cond:
            if entry.expired_at is None:
                return None
            # The watchdog is killing the children and dumping stacks: wait for the whole story.
            self._cond.wait_for(lambda: entry.message_final, timeout=10.0)
            undelivered = entry.pending is not None or entry.delivered_at is None
            entry.pending = None
            if undelivered and entry.interrupts <= 1:
                return (entry.message or "") + (
                    "\n(The test ended before the interrupt reached it, e.g. once its children were "
                    "killed; it fails for having run past its outer timeout.)"
                )
            return entry.message

    # -- watchdog thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stop or not self._entries:  # a fork, or no test armed: end
                        if self._thread is threading.current_thread():
                            self._thread = None
                        return
                    now = time.monotonic()
                    due = [e for e in self._entries if e.due <= now]
                    if due:
                        break
                    self._cond.wait(min(e.due for e in self._entries) - now)
            for entry in due:
                try:
                    self._fire(entry)
                except Exception as e:  # never let the watchdog die silently
                    _write_real_stderr(f"faultline watchdog: error while handling {entry.label}: {e!r}\n")

    def _fire(self, entry: OuterTimeout) -> None:
        now = time.monotonic()
        with self._cond:
            if entry.done:
                return
            pending = entry.pending is not None
        if pending:
            if now - entry.pending_since >= entry.grace_s:
                self._hard_exit(entry, f"the main thread did not take the interrupt within {entry.grace_s:g} s")
            self._interrupt(entry, now + RETRY_S)
            return
        if entry.interrupts >= 2:
            self._hard_exit(entry, f"it was still running {entry.grace_s:g} s after its second interrupt")

        if entry.interrupts == 0:
            head = (
                f"faultline: outer timeout: {entry.label} ran longer than {entry.seconds:g} s "
                f"({entry.source}) and was interrupted."
            )
            with self._cond:  # set before the kill: the test may end as soon as its children die
                entry.expired_at = now
                entry.message = head
        else:
            head = (
                f"faultline: outer timeout: {entry.label} was still running {entry.grace_s:g} s after "
                f"its {entry.seconds:g} s timeout ({entry.source}) was delivered; interrupted again."
            )
        # Stacks first: taken after the kill they would show where the test went once its children
        # died, not where it was stuck.
        stacks = dump_stacks(entry.main_ident)
        child_stacks = ""
        if entry.child_stacks is not None and entry.interrupts == 0:
            try:
                child_stacks = entry.child_stacks()
            except Exception as e:  # the stacks are a courtesy: the kill must happen
                child_stacks = f"(the children's stacks could not be taken: {e!r})"
        killed = self._kill(entry)
        parts = [head, _killed_text(killed), "Stacks of every thread at expiry:", stacks]
        if child_stacks:
            parts += ["Stacks of the test's child processes at expiry (faultline's agent):", child_stacks]
        message = "\n".join(parts)
        with self._cond:
            if entry.interrupts == 0:
                entry.message = message
                entry.message_final = True
                self._cond.notify_all()
            if entry.done:
                return
            entry.pending = message
            entry.pending_since = now
            entry.interrupts += 1
        self._interrupt(entry, now + RETRY_S)

    def _kill(self, entry: OuterTimeout) -> list:
        if entry.kill_children is None:
            return []
        killed = entry.kill_children() or []
        entry.killed.extend(killed)
        return killed

    def _interrupt(self, entry: OuterTimeout, next_due: float) -> None:
        with self._cond:
            entry.due = next_due
        if self.can_interrupt and entry.main_ident is not None:
            try:
                signal.pthread_kill(entry.main_ident, INTERRUPT_SIGNAL)
            except (ProcessLookupError, OSError):
                pass

    def _hard_exit(self, entry: OuterTimeout, why: str) -> None:
        self._kill(entry)
        _write_real_stderr(
            f"\nfaultline: outer timeout: {entry.label} ({entry.seconds:g} s, {entry.source}) could not "
            f"be ended: {why}.\n{_killed_text(entry.killed)}\nStacks of every thread:\n"
            f"{dump_stacks(entry.main_ident)}\n"
            f"faultline: ending the test session now (os._exit({HARD_EXIT_STATUS})) rather than "
            f"leave the runner wedged.\n"
        )
        os._exit(HARD_EXIT_STATUS)


def _killed_text(killed: list) -> str:
    if not killed:
        return "No child process of the test was running (or none was tracked)."
    lines = [f"Killed {len(killed)} child process{'es' if len(killed) != 1 else ''} of the test first:"]
    lines += [f"  {k}" for k in killed]
    return "\n".join(lines)


def _write_real_stderr(text: str) -> None:
    data = text.encode(errors="replace")
    fd = _REAL_STDERR if _REAL_STDERR >= 0 else 2
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        pass


watchdog = Watchdog()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=watchdog._before_fork,
        after_in_parent=watchdog._after_fork_in_parent,
        after_in_child=watchdog._after_fork_in_child,
    )
