"""Driving the `faultline` command: find it, read its catalog, run a campaign, judge its summary.

    binary, how = find_faultline(None, rootpath)              # option / FAULTLINE_BIN / PATH / build/bin
    for scenario in list_scenarios(binary):                  # `faultline list --json`
        result = run_campaign(binary, scenario.name, backend="sim", repeat=10, out_dir=out,
                              outer_timeout_s=300)           # `faultline run NAME --json ...`
        verdict = judge(result, required_rate=None)          # clean: no run may fail

    env = agent_env(binary, run_dir, faults="exit/end=kill")  # `faultline agent-env --json`
    ...                                                      # processes started with env carry the agent
    report = agent_report(binary, run_dir)                   # `faultline agent-report DIR --json`

Everything the harness says is kept as it said it (`CampaignResult.summary` is its JSON object); the
verdict only adds whether the expectation was met and the text of a failure message.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Tuple

__all__ = [
    "AgentReport",
    "BugPoint",
    "CampaignResult",
    "HarnessError",
    "Scenario",
    "Verdict",
    "agent_env",
    "agent_report",
    "crash_line",
    "find_faultline",
    "judge",
    "late_cuda_line",
    "list_scenarios",
    "run_campaign",
]

BACKENDS = ("sim", "cuda")


class HarnessError(Exception):
    """The faultline command could not be found, run or understood."""


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_faultline(
    option: Optional[str], rootpath: Path, environ: Optional[Mapping[str, str]] = None
) -> Tuple[Path, str]:
    """The faultline binary and how it was found.

    In order: the `--faultline-bin` option, $FAULTLINE_BIN, `faultline` on PATH, then
    ``build/bin/faultline`` in the rootdir or any directory above it. An option or variable that
    names something that is not an executable file is an error, not a reason to look further.
    Raises HarnessError saying what was tried.
    """
    env = os.environ if environ is None else environ
    for value, name in ((option, "--faultline-bin"), (env.get("FAULTLINE_BIN"), "FAULTLINE_BIN")):
        if value:
            path = Path(value).expanduser()
            if not _executable(path):
                raise HarnessError(f"{name}={value}: not an executable file")
            return path.resolve(), name
    on_path = shutil.which("faultline", path=env.get("PATH"))
    if on_path:
        return Path(on_path).resolve(), "PATH"
    tried = []
    for d in (rootpath, *rootpath.parents):
        candidate = d / "build" / "bin" / "faultline"
        tried.append(str(candidate))
        if _executable(candidate):
            return candidate.resolve(), "build/bin above the rootdir"
    raise HarnessError(
        "faultline binary not found: no --faultline-bin, no FAULTLINE_BIN, none on PATH, and none of "
        + ", ".join(tried[:3])
        + (" ..." if len(tried) > 3 else "")
        + " (build it with ci/setup.sh)"
    )


@dataclass(frozen=True)
class BugPoint:
    point: str
    faults: str
    detect_rate: float


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    timeout_ms: int
    bug_points: Tuple[BugPoint, ...]


def list_scenarios(binary: Path, *, timeout_s: float = 60.0) -> List[Scenario]:
    """The catalog, from ``faultline list --json``. Raises HarnessError on any failure."""
    cmd = [str(binary), "list", "--json"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"{shlex.join(cmd)}: {e}") from None
    if proc.returncode != 0:
        raise HarnessError(f"{shlex.join(cmd)} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    try:
        data = json.loads(proc.stdout)
        return [
            Scenario(
                name=str(s["name"]),
                description=str(s.get("description", "")),
                timeout_ms=int(s["timeout_ms"]),
                bug_points=tuple(
                    BugPoint(str(b["point"]), str(b["faults"]), float(b["detect_rate"])) for b in s.get("bug_points", [])
                ),
            )
            for s in data
        ]
    except (ValueError, KeyError, TypeError) as e:
        raise HarnessError(f"{shlex.join(cmd)}: unexpected output ({e!r}): {proc.stdout[:500]!r}") from None


@dataclass
class CampaignResult:
    """One `faultline run` of one scenario variant."""

    command: List[str]
    env: Dict[str, str]  # what was added to the environment
    returncode: Optional[int]  # None: killed by the outer timeout
    summary: Optional[dict]  # the JSON summary line, None when there was none
    stdout: str
    stderr: str
    duration_s: float
    outer_timeout_s: float
    out_dir: Path

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_campaign(
    binary: Path,
    scenario: str,
    *,
    backend: str,
    repeat: int,
    out_dir: Path,
    outer_timeout_s: float,
    seed: Optional[str] = None,
    faults: Optional[str] = None,
    run_timeout: Optional[str] = None,
    jobs: int = 1,
    grace_s: float = 5.0,
) -> CampaignResult:
    """Run ``faultline run SCENARIO --json`` on `backend` (FAULTLINE_DEVICE) and collect its summary.

    The command runs in a session of its own; past `outer_timeout_s` it gets SIGTERM, then SIGKILL
    after `grace_s` (faultline's keepers then end every run's process tree), and the result has
    ``returncode`` None.
    """
    # --replace: each call is a new campaign; a session run again (or --faultline-out reused) starts
    # over in the same directory, which faultline otherwise refuses rather than replace unasked.
    cmd = [str(binary), "run", scenario, "--repeat", str(repeat), "--jobs", str(jobs), "--json", "--out", str(out_dir),
           "--replace"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if faults:
        cmd += ["--faults", faults]
    if run_timeout:
        cmd += ["--timeout", run_timeout]
    added = {"FAULTLINE_DEVICE": backend}
    env = dict(os.environ, **added)
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
        )
    except OSError as e:
        raise HarnessError(f"{shlex.join(cmd)}: {e}") from None
    returncode: Optional[int]
    try:
        stdout, stderr = proc.communicate(timeout=outer_timeout_s)
        returncode = proc.returncode
    except subprocess.TimeoutExpired:
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                stdout, stderr = proc.communicate(timeout=wait_s)
                break
            except subprocess.TimeoutExpired:
                continue
        returncode = None
    summary = None
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and "outcomes" in obj:
                summary = obj
    return CampaignResult(
        command=cmd,
        env=added,
        returncode=returncode,
        summary=summary,
        stdout=stdout,
        stderr=stderr,
        duration_s=time.monotonic() - start,
        outer_timeout_s=outer_timeout_s,
        out_dir=out_dir,
    )


@dataclass
class Verdict:
    """Whether a campaign met its expectation, with the properties and message to report."""

    ok: bool
    outcome: str  # passed | failed | detected | missed | error | timeout
    message: str
    properties: List[Tuple[str, object]] = field(default_factory=list)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def repro_command(result: CampaignResult, binary: Path) -> Optional[str]:
    """The harness's repro line, runnable as it stands: the backend and the binary's path added."""
    repro = (result.summary or {}).get("repro")
    if not repro:
        return None
    if repro.startswith("faultline "):
        repro = shlex.quote(str(binary)) + repro[len("faultline") :]
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in result.env.items())
    return f"{prefix} {repro}" if prefix else repro


def judge(result: CampaignResult, binary: Path, *, label: str, required_rate: Optional[float]) -> Verdict:
    """Judge a campaign: a clean variant (`required_rate` None) must have no failed run; a bug point
    variant must be detected (any outcome but pass) in at least `required_rate` of its runs."""
    props: List[Tuple[str, object]] = [("faultline_command", shlex.join(result.command))]
    props += [(f"faultline_env_{k}", v) for k, v in result.env.items()]
    tail = (result.stderr or "").strip()
    tail = "\n".join(tail.splitlines()[-15:])
    if result.timed_out:
        props.append(("faultline_outcome", "timeout"))
        return Verdict(
            False,
            "timeout",
            f"{label}: faultline did not finish within its outer timeout of {result.outer_timeout_s:g} s "
            f"and was killed.\ncommand: {shlex.join(result.command)}\nresults so far: "
            f"{result.out_dir / 'results.jsonl'}\nstderr:\n{tail}",
            props,
        )
    s = result.summary
    if s is None or result.returncode not in (0, 1):
        props.append(("faultline_outcome", "error"))
        return Verdict(
            False,
            "error",
            f"{label}: faultline exited {result.returncode} without a summary it could be judged by.\n"
            f"command: {shlex.join(result.command)}\nstderr:\n{tail}",
            props,
        )
    runs = int(s.get("runs", 0))
    outcomes: Dict[str, int] = s.get("outcomes", {})
    failures = runs - int(outcomes.get("pass", 0))
    rate = failures / runs if runs else 0.0
    repro = repro_command(result, binary)
    counts = " ".join(f"{k}={v}" for k, v in sorted(outcomes.items()) if v)
    if required_rate is None:
        ok = result.returncode == 0 and failures == 0 and runs > 0
        outcome = "passed" if ok else "failed"
    else:
        ok = runs > 0 and rate >= required_rate
        outcome = "detected" if ok else "missed"
    props += [
        ("faultline_outcome", outcome),
        ("faultline_outcomes", counts),
        ("faultline_runs", runs),
        ("faultline_failures", failures),
        ("faultline_failure_rate", round(rate, 6)),
        ("faultline_failure_rate_lower95", s.get("failure_rate_lower95")),
        ("faultline_failure_rate_upper95", s.get("failure_rate_upper95")),
        ("faultline_seed", s.get("seed")),
        ("faultline_repro", repro or ""),
        ("faultline_results", str(result.out_dir / "results.jsonl")),
    ]
    if required_rate is not None:
        props.append(("faultline_required_rate", required_rate))
    lo, hi = s.get("failure_rate_lower95"), s.get("failure_rate_upper95")
    interval = f", 95% interval {_pct(lo)}-{_pct(hi)}" if lo is not None and hi is not None else ""
    of_runs = f"{failures} of {runs} {'run' if runs == 1 else 'runs'}"
    if required_rate is None:
        head = f"{label}: {of_runs} failed (failure rate {_pct(rate)}{interval}); expected none"
    else:
        head = (
            f"{label}: the bug point was detected in {of_runs} (rate {_pct(rate)}{interval}); "
            f"required {_pct(required_rate)}"
        )
    lines = [head, f"outcomes: {counts or 'none'}"]
    for sig in s.get("signatures", [])[:5]:
        log = sig.get("log")
        lines.append(
            f"signature: {sig.get('outcome')} in phase {sig.get('phase')}: {sig.get('signature')} "
            f"x{sig.get('count')} (first run {sig.get('first_run')}"
            + (f", log {result.out_dir / log}" if log else "")
            + ")"
        )
    if s.get("points_never_reached"):
        lines.append("fault points never reached: " + ", ".join(s["points_never_reached"]))
    lines.append(f"seed: {s.get('seed')}")
    lines.append(f"repro: {repro or '(no failed run to replay)'}")
    lines.append(f"results: {result.out_dir / 'results.jsonl'}")
    return Verdict(ok, outcome, "\n".join(lines), props)


# --------------------------------------------------------------------------------------------
# The agent in processes faultline does not start (agent-env / agent-report)
# --------------------------------------------------------------------------------------------


def _run_json(cmd: List[str], *, ok: Tuple[int, ...], environ: Optional[Mapping[str, str]], timeout_s: float) -> dict:
    """Run `cmd` and return the JSON object it printed; HarnessError on any other result."""
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=None if environ is None else dict(environ)
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"{shlex.join(cmd)}: {e}") from None
    if proc.returncode not in ok:
        said = proc.stderr.strip().splitlines()
        raise HarnessError(f"{said[0] if said else 'no message'} ({shlex.join(cmd)} exited {proc.returncode})")
    try:
        data = json.loads(proc.stdout)
    except ValueError as e:
        raise HarnessError(f"{shlex.join(cmd)}: unexpected output ({e}): {proc.stdout[:500]!r}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{shlex.join(cmd)}: expected a JSON object, got {proc.stdout[:500]!r}")
    return data


def agent_env(
    binary: Path,
    run_dir: Path,
    *,
    faults: str = "",
    seed: Optional[str] = None,
    late_cuda: bool = False,
    environ: Optional[Mapping[str, str]] = None,
    timeout_s: float = 60.0,
) -> Dict[str, str]:
    """The variables that put faultline's agent into every process started with them, writing into
    `run_dir` (``faultline agent-env --json``, which creates the directory). `environ` is the
    environment the variables are meant for (default: this process's): LD_PRELOAD keeps its value
    behind the agent. Raises HarnessError with faultline's own message for a bad spec, a directory
    already used, CUDA_INJECTION64_PATH already set with `late_cuda`, or a binary that fails."""
    cmd = [str(binary), "agent-env", "--run-dir", str(run_dir), "--json"]
    if faults:
        cmd += ["--faults", faults]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    if late_cuda:
        cmd.append("--late-cuda")
    data = _run_json(cmd, ok=(0,), environ=environ, timeout_s=timeout_s)
    return {str(k): str(v) for k, v in data.items()}


@dataclass
class AgentReport:
    """``faultline agent-report DIR --json``: what the agent-carrying processes left in DIR."""

    command: List[str]
    crashes: List[dict]  # {"pid", "thread", "signal": {"name", "number"}, "phase", "signature"}
    late_cuda: List[dict]  # {"api", "calls", "pids", "phase", "signature"}
    points_reached: List[str]
    points_never_reached: Optional[List[str]]  # None: the directory does not name its spec
    processes: int  # how many processes carried the agent

    @property
    def found(self) -> bool:
        return bool(self.crashes or self.late_cuda)


def agent_report(
    binary: Path, run_dir: Path, *, environ: Optional[Mapping[str, str]] = None, timeout_s: float = 120.0
) -> AgentReport:
    """Read an agent directory (``faultline agent-report DIR --json``). Raises HarnessError when it
    cannot be read (no such directory) or faultline fails."""
    cmd = [str(binary), "agent-report", str(run_dir), "--json"]
    data = _run_json(cmd, ok=(0, 1), environ=environ, timeout_s=timeout_s)
    try:
        never = data.get("points_never_reached")
        return AgentReport(
            command=cmd,
            crashes=list(data["crashes"]),
            late_cuda=list(data["late_cuda"]),
            points_reached=[str(p) for p in data["points_reached"]],
            points_never_reached=None if never is None else [str(p) for p in never],
            processes=int(data.get("processes", 0)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise HarnessError(f"{shlex.join(cmd)}: unexpected output ({e!r}): {json.dumps(data)[:500]}") from None


def crash_line(crash: dict) -> str:
    """One crash as agent-report prints it: "crash: pid 12, SIGSEGV, phase run: SIGSEGV: f | main"."""
    signal_name = (crash.get("signal") or {}).get("name", "?")
    return f"crash: pid {crash.get('pid')}, {signal_name}, phase {crash.get('phase')}: {crash.get('signature')}"


def late_cuda_line(call: dict) -> str:
    """One API's late calls as agent-report prints them."""
    pids = [str(p) for p in call.get("pids", [])]
    return (
        f"late CUDA call: {call.get('api')} x{call.get('calls')} (pid{'s' if len(pids) != 1 else ''} "
        f"{', '.join(pids)}), phase {call.get('phase', 'exit')}: {call.get('signature')}"
    )
