"""The pytest plugin (entry point ``pytest11: faultline``): scenario catalog, outer timeouts, children.

What it adds to a session:

- ``--faultline-scenarios``: faultline's catalog (``faultline list --json``) collected as tests, one
  per scenario and backend (``exit/static-pool[sim]``), each run through ``faultline run --json``
  under an outer timeout; outcome, failure rate and repro command go to the failure message and to
  the test's properties (JUnit ``<property>``). ``--faultline-bug-points`` adds one test per bug
  point, expected to be detected.
- Outer per-test timeouts: the ``faultline_timeout(seconds)`` marker, or ``faultline_timeouts``
  ini lines mapping directories to timeouts, scaled by `timeout_scale()`; on expiry the test's
  children are killed first, every thread's stack is dumped and the test fails (watchdog.py).
  ``faultline_require_timeout`` lists directories whose tests must have one: a test there with
  none fails at setup, loudly.
- Children: the ``faultline_children`` fixture (a `ChildTracker` for the test). Its leftovers are
  killed at the very start of the test's teardown, before *any* fixture finaliser runs, whatever
  the fixtures' order: pytest tears fixtures down in reverse setup order, so a pool fixture that
  depends on a child tracker fixture is closed *before* the tracker's own teardown would run; the
  hook wrapper around ``pytest_runtest_teardown`` does not depend on that order.
- Fault specs for the session's own tests (agent.py): ``--faultline-faults=SPEC`` applies to every
  test (and still to the catalog's clean variants), ``@pytest.mark.faultline_faults("SPEC")`` gives
  one test its own (it wins; ``""`` turns the option off for that test), ``--faultline-late-cuda`` /
  ``late_cuda=True`` also check for CUDA calls after the runtime's teardown. For such a test the
  autouse fixture ``_faultline_agent`` asks ``faultline agent-env`` for the agent's environment
  (directory BASETEMP/faultline-agent/NODEID) and sets it in ``os.environ`` from before the test's
  first function-scoped fixture until after its last finaliser, restoring exactly what was there:
  every process that the test, its function-scoped fixtures and their finalisers start (subprocess,
  multiprocessing ``spawn``, their children) carries the agent. A fixture rather than a hook
  wrapper around setup: every wider-scoped fixture is set up before it, so a session fixture's
  server, even one first set up for this test, never carries this test's agent and directory. Not
  covered: the pytest process itself (already running: LD_PRELOAD acts at exec), ``fork`` children
  and a forkserver started before the test. ``faultline agent-report`` runs after the call (its
  findings fail a passed test, or add a section to a failed one) and after the teardown (later
  findings fail the teardown); findings and the points reached become the test's properties, and
  spec items no process reached give a ``FaultlineFaultsWarning``. Without a usable faultline the
  test errors at setup: it never runs without the faults it asked for.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

from .agent import AgentTest, FaultlineFaultsWarning, agent_dir_for, agent_request, dump_agent_stacks
from .children import ChildProcess, ChildTracker
from .harness import BACKENDS, BugPoint, HarnessError, Scenario, find_faultline, judge, list_scenarios, run_campaign
from .timeouts import TimeoutScale, lookup_rule, parse_duration, parse_timeout_rules, path_matches, timeout_scale
from .watchdog import INTERRUPT_SIGNAL, OuterTimeout, OuterTimeoutError, watchdog

LEFTOVER_MODES = ("warn", "fail", "ignore")
_CAN_TRACK = sys.platform.startswith("linux") and os.path.isdir("/proc/self")


class FaultlineChildrenWarning(UserWarning):
    """A test left child processes running; they were killed before its fixtures were torn down."""


@dataclass
class _Settings:
    scale: TimeoutScale
    rules: list
    require: List[str]
    track_all: bool
    leftovers: str
    interrupt: bool
    missing_timeout: List[str] = field(default_factory=list)
    expired: List[str] = field(default_factory=list)
    with_leftovers: List[Tuple[str, int]] = field(default_factory=list)


@dataclass
class _ItemState:
    want_tracker: bool = False
    tracker: Optional[ChildTracker] = None  # opened by the first function-scoped fixture
    kill_at_teardown: bool = False
    timeout: Optional[OuterTimeout] = None
    error: Optional[str] = None
    leftovers: List[ChildProcess] = field(default_factory=list)
    agent_dir: Optional[Path] = None  # the test's agent directory, when it has a fault spec

    def kill_children(self) -> List[ChildProcess]:
        """The outer timeout's first act (watchdog thread): kill, do not reap."""
        tracker = self.tracker
        return tracker.kill_leftovers(reap=False) if tracker is not None else []

    def child_stacks(self) -> str:
        """Just before that (watchdog thread): the stacks of the test's children that carry the
        agent (a test with a fault spec), each asked for a dump."""
        tracker, agent = self.tracker, self.agent_dir
        if tracker is None or agent is None:
            return ""
        return dump_agent_stacks(agent, [c.pid for c in tracker.children()])


_SETTINGS = pytest.StashKey[_Settings]()
_ITEM = pytest.StashKey[_ItemState]()
_AGENT = pytest.StashKey[AgentTest]()


# --------------------------------------------------------------------------------------------
# Options
# --------------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("faultline", "faultline: scenario catalog, outer timeouts, child processes")
    group.addoption("--faultline-scenarios", action="store_true", help="collect faultline's scenario catalog as tests")
    group.addoption(
        "--faultline-bug-points",
        action="store_true",
        help="also collect one test per bug point, expected to be detected (implies --faultline-scenarios)",
    )
    group.addoption("--faultline-bin", metavar="PATH", help="the faultline binary (else $FAULTLINE_BIN, PATH, build/bin)")
    group.addoption(
        "--faultline-backends",
        metavar="LIST",
        default="sim,cuda",
        help="backends to run each scenario on (FAULTLINE_DEVICE), comma-separated; cuda is skipped "
        "where no GPU answers (default: sim,cuda)",
    )
    group.addoption("--faultline-repeat", type=int, default=10, metavar="N", help="runs per scenario test (default 10)")
    group.addoption("--faultline-jobs", type=int, default=1, metavar="J", help="runs at once (default 1)")
    group.addoption("--faultline-seed", metavar="S", help="base seed (default: the harness's, reported)")
    group.addoption(
        "--faultline-faults",
        metavar="SPEC",
        help="fault spec for every test of the session: its processes carry faultline's agent and its "
        "crashes fail it (the faultline_faults marker overrides it); and for every clean scenario variant, "
        "which still expects no failed run",
    )
    group.addoption(
        "--faultline-late-cuda",
        action="store_true",
        help="every test's processes also carry the agent as their CUDA injection library: a CUDA call "
        "after the runtime's teardown fails the test (needs CUPTI; changes exit races)",
    )
    group.addoption("--faultline-run-timeout", metavar="DUR", help="each run's timeout (default: the scenario's, scaled)")
    group.addoption(
        "--faultline-campaign-timeout",
        metavar="DUR",
        help="outer timeout of each scenario test's campaign (default: every batch of runs at its whole "
        "timeout plus 5 s, plus 30 s)",
    )
    group.addoption("--faultline-out", metavar="DIR", help="results directory (default: under pytest's basetemp)")
    parser.addini(
        "faultline_timeouts",
        type="linelist",
        default=[],
        help="outer per-test timeouts by directory, one 'PATH-OR-GLOB = SECONDS' per line (most specific wins)",
    )
    parser.addini(
        "faultline_require_timeout",
        type="linelist",
        default=[],
        help="directories (paths or globs) whose tests must run under an outer timeout; one without fails",
    )
    parser.addini(
        "faultline_track_children",
        type="bool",
        default=False,
        help="track and kill the leftover children of every test, as if each used faultline_children",
    )
    parser.addini(
        "faultline_children_leftovers",
        default="warn",
        help="what a test that left children running gets, once they are killed: warn (default), fail, ignore",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "faultline_timeout(seconds, scale=True): outer timeout of this test (setup, call and teardown), "
        "scaled for slow environments unless scale=False; 0 turns an ini timeout off",
    )
    config.addinivalue_line("markers", "faultline_scenario: a scenario of faultline's catalog (--faultline-scenarios)")
    config.addinivalue_line(
        "markers",
        "faultline_faults(spec, late_cuda=False): the processes this test starts carry faultline's agent with "
        "this fault spec (overrides --faultline-faults; \"\" turns it off); their crashes and, with late_cuda, "
        "CUDA calls after the runtime's teardown fail the test",
    )
    try:
        rules = parse_timeout_rules(config.getini("faultline_timeouts"))
        scale = timeout_scale()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    leftovers = str(config.getini("faultline_children_leftovers")).strip() or "warn"
    if leftovers not in LEFTOVER_MODES:
        raise pytest.UsageError(f"faultline_children_leftovers = {leftovers!r}: expected one of {', '.join(LEFTOVER_MODES)}")
    if _scenarios_wanted(config):
        _backends(config)  # refuses a bad list now, not at collection
        if config.getoption("faultline_repeat") < 1 or config.getoption("faultline_jobs") < 1:
            raise pytest.UsageError("--faultline-repeat and --faultline-jobs must be at least 1")
        for name in ("faultline_run_timeout", "faultline_campaign_timeout"):
            if config.getoption(name):
                try:
                    parse_duration(config.getoption(name))
                except ValueError as e:
                    raise pytest.UsageError(f"--{name.replace('_', '-')}: {e}") from None
    interrupt = watchdog.install()
    if interrupt:
        config.add_cleanup(watchdog.uninstall)
    config.stash[_SETTINGS] = _Settings(
        scale=scale,
        rules=rules,
        require=[p for p in (s.strip() for s in config.getini("faultline_require_timeout")) if p],
        track_all=bool(config.getini("faultline_track_children")),
        leftovers=leftovers,
        interrupt=interrupt,
    )


def pytest_report_header(config: pytest.Config) -> List[str]:
    s = config.stash[_SETTINGS]
    how = (
        f"the main thread interrupted by signal {int(INTERRUPT_SIGNAL)} (SIGRTMIN+5)"
        if s.interrupt
        else "no interrupt (not on the main thread): children killed, then the session ends"
    )
    lines = [f"faultline: timeouts scaled {s.scale}; outer timeouts: {how}"]
    if _scenarios_wanted(config):
        try:
            binary, found = find_faultline(config.getoption("faultline_bin"), config.rootpath)
            lines.append(f"faultline: scenarios from {binary} ({found}), backends {', '.join(_backends(config))}")
        except HarnessError as e:
            lines.append(f"faultline: {e}")
    return lines


def _scenarios_wanted(config: pytest.Config) -> bool:
    return bool(config.getoption("faultline_scenarios") or config.getoption("faultline_bug_points"))


def _backends(config: pytest.Config) -> List[str]:
    names = [b.strip() for b in str(config.getoption("faultline_backends")).split(",") if b.strip()]
    bad = [b for b in names if b not in BACKENDS]
    if bad or not names:
        raise pytest.UsageError(
            f"--faultline-backends={config.getoption('faultline_backends')}: expected a comma-separated "
            f"list of {', '.join(BACKENDS)}"
        )
    return list(dict.fromkeys(names))


# --------------------------------------------------------------------------------------------
# The scenario catalog as tests
# --------------------------------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    report = yield
    if isinstance(collector, pytest.Session) and _scenarios_wanted(collector.config) and report.passed:
        # Named "faultline" in test ids and reports (faultline::exit/static-pool[sim]); the path is
        # only a label: nothing is read from it.
        catalog = FaultlineCatalog.from_parent(
            collector, name="faultline", path=collector.config.rootpath / "faultline", nodeid="faultline"
        )
        report.result.append(catalog)
    return report


def cuda_absence_reason() -> Optional[str]:
    """Why the cuda backend cannot run here, or None when a GPU answers."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"cuda backend: nvidia-smi -L failed ({e})"
        if proc.returncode == 0 and "GPU " in proc.stdout:
            return None
        said = (proc.stdout + proc.stderr).strip().splitlines()
        return f"cuda backend: nvidia-smi lists no GPU (exit {proc.returncode}: {said[0] if said else 'no output'})"
    if os.path.exists("/dev/nvidia0"):
        return None
    return "cuda backend: no GPU here (no nvidia-smi on PATH, no /dev/nvidia0); --faultline-backends=sim runs sim only"


class FaultlineCatalog(pytest.Collector):
    """faultline's scenario catalog: one `FaultlineScenario` per scenario (and bug point) and backend."""

    def collect(self):
        config = self.config
        try:
            binary, _ = find_faultline(config.getoption("faultline_bin"), config.rootpath)
            scenarios = list_scenarios(binary)
        except HarnessError as e:
            raise self.CollectError(f"faultline: {e}") from None
        backends = _backends(config)
        cuda_skip = cuda_absence_reason() if "cuda" in backends else None
        with_bugs = bool(config.getoption("faultline_bug_points"))
        for scenario in scenarios:
            variants = [None] + (list(scenario.bug_points) if with_bugs else [])
            for bug in variants:
                for backend in backends:
                    base = scenario.name if bug is None else f"{scenario.name}@{bug.point}"
                    item = FaultlineScenario.from_parent(
                        self, name=f"{base}[{backend}]", scenario=scenario, backend=backend, bug_point=bug, binary=binary
                    )
                    if backend == "cuda" and cuda_skip:
                        item.add_marker(pytest.mark.skip(reason=cuda_skip))
                    yield item


class ScenarioFailed(Exception):
    """A scenario variant did not meet its expectation; the message is the whole report."""


class FaultlineScenario(pytest.Item):
    """One scenario variant on one backend, run as a faultline campaign."""

    def __init__(self, *, scenario: Scenario, backend: str, bug_point: Optional[BugPoint], binary: Path, **kw) -> None:
        super().__init__(**kw)
        self.scenario = scenario
        self.backend = backend
        self.bug_point = bug_point
        self.binary = binary
        config = self.config
        scale = config.stash[_SETTINGS].scale.factor
        self.repeat = int(config.getoption("faultline_repeat"))
        self.jobs = min(int(config.getoption("faultline_jobs")), self.repeat)
        option = config.getoption("faultline_run_timeout")
        if option:
            run_s, self.run_timeout = parse_duration(option), option
        else:
            run_s = scenario.timeout_ms / 1000.0 * scale
            self.run_timeout = None if scale == 1 else f"{int(math.ceil(run_s * 1000))}ms"
        # A bound on the campaign: every batch of runs may use its whole timeout, plus stack capture
        # and the TERM-to-KILL grace; the item's own outer timeout stands behind it.
        option = config.getoption("faultline_campaign_timeout")
        if option:
            self.campaign_timeout_s = parse_duration(option)
        else:
            self.campaign_timeout_s = math.ceil(self.repeat / self.jobs) * (run_s + 5.0) + 30.0
        self.add_marker(pytest.mark.faultline_scenario)
        self.add_marker(
            pytest.mark.faultline_timeout(
                self.campaign_timeout_s + 30.0, scale=False, source="the campaign's bound plus 30 s"
            )
        )

    @property
    def faults(self) -> Optional[str]:
        return self.bug_point.faults if self.bug_point else self.config.getoption("faultline_faults")

    def _out_dir(self) -> Path:
        base = self.config.getoption("faultline_out")
        if base:
            root = Path(base)
        else:
            factory = getattr(self.config, "_tmp_path_factory", None)
            root = factory.getbasetemp() / "faultline" if factory else Path(tempfile.mkdtemp(prefix="faultline-"))
        variant = self.scenario.name + (f"@{self.bug_point.point}" if self.bug_point else "")
        return root / self.backend / variant.replace("/", "-")

    def runtest(self) -> None:
        result = run_campaign(
            self.binary,
            self.scenario.name,
            backend=self.backend,
            repeat=self.repeat,
            jobs=self.jobs,
            out_dir=self._out_dir(),
            outer_timeout_s=self.campaign_timeout_s,
            seed=self.config.getoption("faultline_seed"),
            faults=self.faults,
            run_timeout=self.run_timeout,
        )
        verdict = judge(
            result,
            self.binary,
            label=f"{self.scenario.name} [{self.backend}]"
            + (f" with bug point {self.bug_point.point}" if self.bug_point else ""),
            required_rate=self.bug_point.detect_rate if self.bug_point else None,
        )
        self.user_properties += [
            ("faultline_scenario", self.scenario.name),
            ("faultline_variant", self.bug_point.point if self.bug_point else "clean"),
            ("faultline_backend", self.backend),
            ("faultline_faults", self.faults or ""),
        ] + verdict.properties
        if not verdict.ok:
            raise ScenarioFailed(verdict.message)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, 0, f"faultline {self.name}"


# --------------------------------------------------------------------------------------------
# Outer timeouts and children, per test
# --------------------------------------------------------------------------------------------


def _relpath(item: pytest.Item) -> str:
    try:
        return item.path.resolve().relative_to(item.config.rootpath.resolve()).as_posix()
    except ValueError:
        return item.path.resolve().as_posix()


def _resolve_timeout(item: pytest.Item, s: _Settings) -> Tuple[Optional[float], str]:
    """The test's outer timeout in seconds (None: none) and where it came from.

    Raises ValueError for a malformed marker.
    """
    marker = item.get_closest_marker("faultline_timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("seconds")
        if isinstance(value, str):
            value = parse_duration(value)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value >= 0 and math.isfinite(value)):
            raise ValueError(f"faultline_timeout({value!r}): expected a non-negative number of seconds")
        scaled = bool(marker.kwargs.get("scale", True))
        source = marker.kwargs.get("source") or f"faultline_timeout({value:g}) marker"
        seconds = float(value)
    else:
        rule = lookup_rule(s.rules, _relpath(item))
        if rule is None:
            return None, ""
        seconds, scaled, source = rule.seconds, True, f"faultline_timeouts: {rule.line}"
    if seconds == 0:
        return None, source
    if scaled and s.scale.factor != 1:
        source += f", scaled {s.scale}"
        seconds *= s.scale.factor
    return seconds, source


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    s = item.config.stash[_SETTINGS]
    state = _ItemState()
    item.stash[_ITEM] = state
    try:
        seconds, source = _resolve_timeout(item, s)
    except ValueError as e:
        seconds, source, state.error = None, "", f"faultline: {item.nodeid}: {e}"
    if seconds is None and state.error is None:
        required = [p for p in s.require if path_matches(p, _relpath(item))]
        if required:
            s.missing_timeout.append(item.nodeid)
            state.error = (
                f"faultline: {item.nodeid} runs under '{required[0]}', which faultline_require_timeout says "
                f"needs an outer timeout, but none applies to it"
                + (f" ({source} turns it off)" if source else "")
                + ". Add @pytest.mark.faultline_timeout(SECONDS) to it, or a faultline_timeouts line "
                f"('{required[0]} = SECONDS') to the ini file."
            )
    state.kill_at_teardown = s.track_all or "faultline_children" in getattr(item, "fixturenames", ())
    state.want_tracker = _CAN_TRACK and (state.kill_at_teardown or bool(seconds))
    if seconds and state.error is None:
        state.timeout = OuterTimeout(
            item.nodeid, seconds, source, kill_children=state.kill_children, child_stacks=state.child_stacks
        )
        item.user_properties.append(("faultline_timeout_s", round(seconds, 3)))
        watchdog.arm(state.timeout)
    try:
        return (yield)
    finally:
        if state.timeout is not None:
            watchdog.disarm(state.timeout)
            if state.timeout.expired:
                s.expired.append(item.nodeid)
        if state.tracker is not None:
            state.tracker.close(kill=state.kill_at_teardown)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = item.stash.get(_ITEM, None)
    if state is not None and state.error:
        pytest.fail(state.error, pytrace=False)


@pytest.fixture(autouse=True)
def _faultline_test_scope(request: pytest.FixtureRequest):
    """Opens the test's ChildTracker. Autouse fixtures of plugins come first among the test's own
    (function-scoped) fixtures and after every wider-scoped one, so what a session or module
    fixture started, even lazily in this test's setup, predates the scope and is never killed."""
    state = request.node.stash.get(_ITEM, None)
    if state is not None and state.want_tracker and state.tracker is None:
        state.tracker = ChildTracker().start()
    yield


@pytest.fixture(autouse=True)
def _faultline_agent(request: pytest.FixtureRequest):
    """The test's agent (agent.py): for a test with a fault spec or late CUDA checking, the agent's
    variables are in os.environ from here (before the test's other function-scoped fixtures, after
    every wider-scoped one) until this finaliser, which runs after theirs, restores them. Catalog
    scenario tests take no fixtures: their spec goes to `faultline run`."""
    item = request.node
    config = item.config
    try:
        wanted = agent_request(item, config.getoption("faultline_faults"), config.getoption("faultline_late_cuda"))
    except ValueError as e:
        wanted, error = None, f"faultline: {item.nodeid}: {e}"
    else:
        error = None
    state = None
    if wanted is not None:
        try:
            binary, _ = find_faultline(config.getoption("faultline_bin"), config.rootpath)
            state = AgentTest.start(wanted, binary, agent_dir_for(item), config.getoption("faultline_seed"))
        except HarnessError as e:
            error = (
                f"faultline: {item.nodeid}: {wanted.source} (faults {wanted.faults!r}) cannot be applied, so the "
                f"test does not run: {e}"
            )
    if error is not None:  # outside the except: no chained exception in the report
        pytest.fail(error, pytrace=False)
    if state is None:
        yield
        return
    item.stash[_AGENT] = state
    item_state = item.stash.get(_ITEM, None)
    if item_state is not None:
        item_state.agent_dir = state.run_dir
    try:
        yield
    finally:
        state.restore()


def _agent_verdict(item: pytest.Item, state: AgentTest, report: pytest.TestReport, when: str) -> None:
    """After the call and after the teardown: what the test's processes left that was not said yet
    fails the phase's report (or adds a section to a failed one); at teardown, the properties and
    the warning for spec items never reached."""
    result = None
    try:
        result = state.report()
        lines = state.new_findings(result)
        message = state.message(item.nodeid, lines, when) if lines else None
    except HarnessError as e:
        message = f"faultline: {item.nodeid}: the agent's report cannot be read: {e}"
    if message is not None:
        if report.failed or hasattr(report, "wasxfail"):
            report.sections.append(("faultline agent", message))
        else:
            report.outcome = "failed"
            report.longrepr = message
    if when == "teardown":
        props = state.properties(result)
        item.user_properties.extend(props)
        report.user_properties.extend(props)  # junitxml reads the teardown report's
        text = state.never_reached_text(item.nodeid, result) if result is not None else None
        if text:
            report.sections.append(("faultline faults", text))
            warnings.warn(FaultlineFaultsWarning(text), stacklevel=1)


@pytest.fixture
def faultline_children(request: pytest.FixtureRequest):
    """The test's `ChildTracker`: every process the test creates is recorded, and those still
    running are killed (whole process group where they lead one) and reaped at the very start of
    the test's teardown, before any fixture's finaliser, whatever order the fixtures are in.

    ``faultline_children.children()`` lists the test's live children, ``.killed`` what was killed.
    """
    state = request.node.stash.get(_ITEM, None)
    if not _CAN_TRACK:
        pytest.fail("faultline_children needs Linux (/proc)", pytrace=False)
    if state is None:  # used outside the runtest protocol
        with ChildTracker() as tracker:
            yield tracker
        return
    if state.tracker is None:  # requested through getfixturevalue: not known when the test began
        state.tracker = ChildTracker().start()
    state.kill_at_teardown = True
    yield state.tracker
    state.tracker.kill_leftovers()  # started by finalisers that ran before this one


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem):
    state = item.stash.get(_ITEM, None)
    s = item.config.stash[_SETTINGS]
    leftovers: List[ChildProcess] = []
    if state is not None and state.tracker is not None and state.kill_at_teardown:
        # Before any fixture finaliser: a pool closed while a child still holds an import hangs.
        leftovers = state.tracker.kill_leftovers()
        state.leftovers = leftovers
        if leftovers:
            s.with_leftovers.append((item.nodeid, len(leftovers)))
            if s.leftovers != "fail":  # else the teardown error says it
                item.add_report_section("teardown", "faultline children", _leftover_text(item, leftovers))
    result = yield
    if leftovers and s.leftovers == "fail":
        pytest.fail(_leftover_text(item, leftovers), pytrace=False)
    if leftovers and s.leftovers == "warn":
        warnings.warn(FaultlineChildrenWarning(_leftover_text(item, leftovers)), stacklevel=1)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    state = item.stash.get(_ITEM, None)
    entry = state.timeout if state is not None else None
    if entry is not None and not entry.reported:
        message = watchdog.report_message(entry)
        if message is not None:
            # A test that ran past its outer timeout fails, even when killing its children let it
            # end on its own before the interrupt arrived, or it swallowed the interrupt.
            entry.reported = True
            if not report.failed:
                report.outcome = "failed"
                report.longrepr = message
            elif call.excinfo is None or not isinstance(call.excinfo.value, OuterTimeoutError):
                report.sections.append(("faultline outer timeout", message))
    agent = item.stash.get(_AGENT, None)
    if agent is not None and call.when in ("call", "teardown"):
        _agent_verdict(item, agent, report, call.when)
    return report


def _leftover_text(item: pytest.Item, leftovers: List[ChildProcess]) -> str:
    n = len(leftovers)
    lines = [
        f"faultline: {n} child process{'es' if n != 1 else ''} of {item.nodeid} still running at teardown, "
        "killed before its fixtures were torn down (check the wait that should have ended "
        f"{'them' if n != 1 else 'it'}: kill_survivors() after a join with a timeout):"
    ]
    lines += [f"  {c}" for c in leftovers]
    return "\n".join(lines)


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    s = config.stash.get(_SETTINGS, None)
    if s is None:
        return
    tr = terminalreporter
    if s.missing_timeout:
        tr.section("faultline: tests without the outer timeout their directory requires", sep="-", red=True)
        for nodeid in s.missing_timeout:
            tr.line(f"  {nodeid}")
    if s.expired:
        tr.write_line(f"faultline: outer timeout expired in {len(s.expired)} test(s): {', '.join(s.expired)}")
    if s.with_leftovers:
        tr.write_line(
            "faultline: children killed at teardown in "
            + ", ".join(f"{nodeid} ({n})" for nodeid, n in s.with_leftovers)
        )
