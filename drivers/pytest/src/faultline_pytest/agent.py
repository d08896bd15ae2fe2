"""Fault specs and agent verdicts for a session's own tests.

A test with a fault spec (``--faultline-faults=SPEC`` for every test, the
``@pytest.mark.faultline_faults("SPEC", late_cuda=False)`` marker for one) runs with faultline's agent
in every process it starts: the plugin asks ``faultline agent-env`` for the agent's environment
(a directory of the test's own under pytest's basetemp), puts it into ``os.environ`` while the test's
function-scoped fixtures and the test run, and puts back exactly what was there after. Afterwards
``faultline agent-report`` says what those processes left: crashes and late CUDA calls fail the test,
and everything, the fault points reached included, goes to its properties.

    state = AgentTest.start(request, binary, run_dir)   # agent-env; os.environ carries the agent
    ...                                                  # the test's fixtures and the test run
    state.restore()                                      # os.environ as it was
    lines = state.new_findings(state.report())           # agent-report: what was not said yet

Only processes *started* while the variables are set carry the agent: the pytest process itself (it
is running already), processes forked from it without an exec (``os.fork()``, multiprocessing's
``fork`` start method) and a forkserver started before the test do not.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

from .harness import AgentReport, agent_env, agent_report, crash_line, late_cuda_line

__all__ = ["AgentRequest", "AgentTest", "FaultlineFaultsWarning", "agent_dir_for", "agent_request", "dump_agent_stacks"]


class FaultlineFaultsWarning(UserWarning):
    """Items of a test's fault spec that no process of the test reached (a misspelt point, or one
    its processes never get to)."""


@dataclass(frozen=True)
class AgentRequest:
    """What a test asks of the agent, and where that came from (for messages)."""

    faults: str
    late_cuda: bool
    source: str


def agent_request(item: pytest.Item, option_faults: Optional[str], option_late_cuda: bool) -> Optional[AgentRequest]:
    """The test's spec: the ``faultline_faults`` marker's where it has one (its spec, else the
    option's; its ``late_cuda``, else the option's), else the options'. None when neither a spec
    nor late CUDA checking applies (``faultline_faults("")`` turns the option's spec off).
    Raises ValueError for a malformed marker."""
    marker = item.get_closest_marker("faultline_faults")
    faults, late_cuda, source = option_faults or "", bool(option_late_cuda), "--faultline-faults"
    if marker is not None:
        if len(marker.args) > 1 or set(marker.kwargs) - {"spec", "late_cuda"}:
            raise ValueError(
                f"faultline_faults{marker.args!r}{marker.kwargs!r}: expected faultline_faults(SPEC, late_cuda=False)"
            )
        spec = marker.args[0] if marker.args else marker.kwargs.get("spec")
        if spec is not None:
            if not isinstance(spec, str):
                raise ValueError(f"faultline_faults({spec!r}): the spec must be a string")
            faults = spec
        late = marker.kwargs.get("late_cuda")
        if late is not None:
            if not isinstance(late, bool):
                raise ValueError(f"faultline_faults(late_cuda={late!r}): expected True or False")
            late_cuda = late
        source = "the faultline_faults marker"
    elif not faults:
        source = "--faultline-late-cuda"
    if not faults.strip() and not late_cuda:
        return None
    return AgentRequest(faults, late_cuda, source)


def agent_dir_for(item: pytest.Item) -> Path:
    """A directory no test used yet: BASETEMP/faultline-agent/NODEID (made safe), not created."""
    factory = getattr(item.config, "_tmp_path_factory", None)
    if factory is not None:
        root = factory.getbasetemp() / "faultline-agent"
    else:  # the tmpdir plugin is off
        import tempfile

        root = Path(tempfile.gettempdir()) / f"faultline-agent-{os.getpid()}"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[-120:] or "test"
    path, n = root / name, 1
    while path.exists():
        n += 1
        path = root / f"{name}-{n}"
    return path


@dataclass
class AgentTest:
    """One test's agent: its directory, the variables set, what they replaced, what was reported."""

    request: AgentRequest
    binary: Path
    run_dir: Path
    variables: Dict[str, str]
    saved: Dict[str, Optional[str]] = field(default_factory=dict)
    applied: bool = False
    crashes_said: Set[Tuple[int, int]] = field(default_factory=set)  # (pid, signal)
    late_said: Dict[str, int] = field(default_factory=dict)  # api -> calls reported

    @classmethod
    def start(cls, request: AgentRequest, binary: Path, run_dir: Path, seed: Optional[str]) -> "AgentTest":
        """``faultline agent-env``, then the variables into os.environ. Raises HarnessError."""
        variables = agent_env(binary, run_dir, faults=request.faults, seed=seed, late_cuda=request.late_cuda)
        state = cls(request, binary, run_dir, variables)
        state.apply()
        return state

    def apply(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.variables}
        os.environ.update(self.variables)
        self.applied = True

    def restore(self) -> None:
        """Every variable back to its value before the test (unset where it was unset), whatever
        the test did to it meanwhile."""
        if not self.applied:
            return
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.applied = False

    def clean_environ(self) -> Dict[str, str]:
        """os.environ without the agent's variables: faultline itself must not carry the agent."""
        env = dict(os.environ)
        if self.applied:
            for k, v in self.saved.items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = v
        return env

    def report(self) -> AgentReport:
        """``faultline agent-report``. Raises HarnessError."""
        return agent_report(self.binary, self.run_dir, environ=self.clean_environ())

    def new_findings(self, report: AgentReport) -> List[str]:
        """The report's crashes and late CUDA calls not reported before, as lines; they count as
        reported from now on (a call's finding is not repeated at teardown)."""
        lines = []
        for c in report.crashes:
            key = (int(c.get("pid", 0)), int((c.get("signal") or {}).get("number", 0)))
            if key not in self.crashes_said:
                self.crashes_said.add(key)
                lines.append(crash_line(c))
        for call in report.late_cuda:
            api, calls = str(call.get("api")), int(call.get("calls", 0))
            if calls > self.late_said.get(api, 0):
                self.late_said[api] = calls
                lines.append(late_cuda_line(call))
        return lines

    def message(self, nodeid: str, lines: List[str], when: str) -> str:
        """The failure message for `lines` found after the test's `when` phase."""
        n = len(lines)
        head = (
            f"faultline: {n} finding{'s' if n != 1 else ''} in processes started by {nodeid}"
            f"{' (found after its teardown)' if when == 'teardown' else ''}, under {self.request.source}"
            f" (faults {self.request.faults or 'none'!r}{', late CUDA calls checked' if self.request.late_cuda else ''}):"
        )
        return "\n".join(
            [head, *(f"  {line}" for line in lines), f"agent directory: {self.run_dir}",
             f"report: {self.binary} agent-report {self.run_dir}"]
        )  # fmt: skip

    def properties(self, report: Optional[AgentReport]) -> List[Tuple[str, object]]:
        """The test's JUnit properties: the spec, the directory, and every finding."""
        props: List[Tuple[str, object]] = [
            ("faultline_faults", self.request.faults),
            ("faultline_seed", self.variables.get("FAULTLINE_SEED", "")),
            ("faultline_agent_dir", str(self.run_dir)),
        ]
        if self.request.late_cuda:
            props.append(("faultline_late_cuda", "checked"))
        if report is None:
            return props
        props += [
            ("faultline_agent_processes", report.processes),
            ("faultline_crashes", len(report.crashes)),
            ("faultline_late_cuda_calls", sum(int(c.get("calls", 0)) for c in report.late_cuda)),
        ]
        props += [("faultline_crash", crash_line(c)) for c in report.crashes]
        props += [("faultline_late_cuda_call", late_cuda_line(c)) for c in report.late_cuda]
        props.append(("faultline_points_reached", ", ".join(report.points_reached)))
        if report.points_never_reached:
            props.append(("faultline_points_never_reached", ", ".join(report.points_never_reached)))
        return props

    def never_reached_text(self, nodeid: str, report: AgentReport) -> Optional[str]:
        """The warning for spec items no process reached; None when there is nothing to say. With the
        option's session-wide spec, a test that started no agent-carrying process says nothing (most
        tests start none)."""
        never = report.points_never_reached or []
        if not never or (report.processes == 0 and self.request.source == "--faultline-faults"):
            return None
        n = report.processes
        who = (
            f"{n} process{'es' if n != 1 else ''} started by {nodeid} carried the agent, and none reached"
            if n
            else f"{nodeid} started no process that carried the agent, so nothing reached"
        )
        return (
            f"faultline: {who} these fault points of its spec {self.request.faults!r}: {', '.join(never)} "
            "(a misspelt point, or one its processes never get to)"
        )


# The agent's stack-dump signal (faults/preload/protocol.h: SIGRTMIN + 7).
_DUMP_SIGNAL = signal.SIGRTMIN + 7


def _catches(pid: int, sig: int) -> bool:
    """Whether process `pid` has a handler for `sig` (SigCgt): only the agent's processes do, and
    the signal's default action would kill any other."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError):
        pass
    return False


def dump_agent_stacks(run_dir: Path, pids: List[int], wait_s: float = 2.0) -> str:
    """Asks each process of `pids` that carries the agent to dump every thread's stack into
    RUN_DIR/stacks.PID, waits up to `wait_s` for the dumps to end, and returns them, one section per
    process ("" when none carries the agent). Frames are the agent's lines ("#K ADDR MODULE+OFFSET
    FUNCTION"), symbolised from the symbol tables."""
    asked = []
    for pid in pids:
        if _catches(pid, _DUMP_SIGNAL):
            try:
                os.kill(pid, _DUMP_SIGNAL)
                asked.append(pid)
            except OSError:
                pass
    deadline = time.monotonic() + wait_s
    texts: Dict[int, str] = {}
    while asked and time.monotonic() < deadline:
        for pid in asked:
            try:
                text = (run_dir / f"stacks.{pid}").read_text(errors="replace")
            except OSError:
                continue
            if "\nend\n" in "\n" + text:
                texts[pid] = text
        if len(texts) == len(asked):
            break
        time.sleep(0.02)
    sections = []
    for pid in asked:
        text = texts.get(pid)
        sections.append(f"--- process {pid}" + (":\n" + text.rstrip() if text else ": no dump within the wait"))
    return "\n".join(sections)
