"""Timeouts scaled for slow environments, durations, and per-directory timeout rules.

A child's timeout that is right on a developer's machine is too short under a sanitizer: in the
anchor the child started slowly under one, the parent's 30 s wait ran out, and everything after
followed from that. `child_timeout(base_s)` multiplies a base timeout by a factor read from the
environment, and the plugin scales every outer per-test timeout by the same factor, so the ratio
between a child's timeout and the test's stays what the author wrote.

    p.join(timeout=child_timeout(30))   # 30 s on a plain machine, 90 s under ASan, 300 s under TSan

The factor (documented in drivers/pytest/README.md):

    FAULTLINE_CHILD_TIMEOUT_SCALE=F        F, and nothing else is looked at
    native instrumentation (the largest):  valgrind 20, ThreadSanitizer 10, AddressSanitizer 3,
                                           MemorySanitizer 3, UBSan alone 1.5
    times Python's own (the largest):      debug build 2, PYTHONMALLOC=*debug 2, coverage 2,
                                           development mode (-X dev, PYTHONDEVMODE) 1.5
    times CI (CI set and not 0/false):     1.5 (shared runners start interpreters slower)

Native instrumentation is seen in LD_PRELOAD, in the libraries mapped into this process
(/proc/self/maps: a Python built with a sanitizer) and in the sanitizers' *_OPTIONS variables.
"""

from __future__ import annotations

import fnmatch
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Tuple

__all__ = [
    "TimeoutScale",
    "TimeoutRule",
    "child_timeout",
    "timeout_scale",
    "parse_duration",
    "parse_timeout_rules",
    "path_matches",
    "lookup_rule",
]

SCALE_VARIABLE = "FAULTLINE_CHILD_TIMEOUT_SCALE"

# (factor, name, library substrings, *_OPTIONS variable); the largest that applies is used.
_NATIVE = (
    (20.0, "valgrind", ("vgpreload",), None),
    (10.0, "ThreadSanitizer", ("libtsan", "libclang_rt.tsan"), "TSAN_OPTIONS"),
    (3.0, "AddressSanitizer", ("libasan", "libclang_rt.asan"), "ASAN_OPTIONS"),
    (3.0, "MemorySanitizer", ("libclang_rt.msan",), "MSAN_OPTIONS"),
    (1.5, "UndefinedBehaviorSanitizer", ("libubsan", "libclang_rt.ubsan"), "UBSAN_OPTIONS"),
)


@dataclass(frozen=True)
class TimeoutScale:
    """The factor child and outer timeouts are multiplied by, and why (empty: a plain machine)."""

    factor: float
    reasons: Tuple[str, ...]

    def __str__(self) -> str:
        why = "; ".join(self.reasons) if self.reasons else "no slow environment detected"
        return f"x{self.factor:g} ({why})"


def _mapped_libraries() -> str:
    try:
        with open("/proc/self/maps", "r", errors="replace") as f:
            return "\n".join(line.rsplit(" ", 1)[-1] for line in f if "/" in line)
    except OSError:
        return ""


def _truthy(value: Optional[str]) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no", "off")


def timeout_scale(environ: Optional[Mapping[str, str]] = None, mapped: Optional[str] = None) -> TimeoutScale:
    """Detect how much slower than a plain machine this environment runs processes.

    `environ` defaults to os.environ and `mapped` (the paths of the mapped libraries, one per line)
    to this process's /proc/self/maps; pass both to evaluate another environment. Raises ValueError
    when FAULTLINE_CHILD_TIMEOUT_SCALE is set but not a positive finite number.
    """
    env = os.environ if environ is None else environ
    override = env.get(SCALE_VARIABLE, "")
    if override.strip():
        try:
            factor = float(override)
        except ValueError:
            factor = float("nan")
        if not (factor > 0 and math.isfinite(factor)):
            raise ValueError(f"{SCALE_VARIABLE}={override!r}: expected a positive number, e.g. 2 or 0.5")
        return TimeoutScale(factor, (f"{SCALE_VARIABLE}={override.strip()}",))

    if mapped is None:
        mapped = _mapped_libraries() if environ is None else ""
    preload = env.get("LD_PRELOAD", "")
    reasons: List[str] = []

    native, native_why = 1.0, None
    for factor, name, libs, options in _NATIVE:
        why = None
        for lib in libs:
            if lib in preload:
                why = f"{name}: LD_PRELOAD has {lib}"
            elif lib in mapped:
                why = f"{name}: {lib} is mapped into this process"
            if why:
                break
        if why is None and options and env.get(options, "").strip():
            why = f"{name}: {options} is set"
        if why and factor > native:
            native, native_why = factor, f"{why} (x{factor:g})"
    if native_why:
        reasons.append(native_why)

    python, python_why = 1.0, None
    candidates = [
        (2.0, hasattr(sys, "gettotalrefcount"), "debug build of Python"),
        (2.0, "debug" in env.get("PYTHONMALLOC", ""), f"PYTHONMALLOC={env.get('PYTHONMALLOC', '')}"),
        (
            2.0,
            bool(env.get("COVERAGE_PROCESS_START") or env.get("COV_CORE_SOURCE")),
            "coverage measurement (COVERAGE_PROCESS_START/COV_CORE_SOURCE)",
        ),
        (1.5, _truthy(env.get("PYTHONDEVMODE")) or (environ is None and sys.flags.dev_mode), "Python development mode"),
    ]
    for factor, applies, why in candidates:
        if applies and factor > python:
            python, python_why = factor, f"{why} (x{factor:g})"
    if python_why:
        reasons.append(python_why)

    ci = 1.5 if _truthy(env.get("CI")) else 1.0
    if ci > 1:
        reasons.append("CI is set (x1.5)")
    return TimeoutScale(native * python * ci, tuple(reasons))


def child_timeout(base_s: float) -> float:
    """`base_s` scaled for this environment: what to give a wait on a child process.

    Raises ValueError for a negative or non-finite base, or a malformed override variable.
    """
    if not (base_s >= 0 and math.isfinite(base_s)):
        raise ValueError(f"child_timeout: base_s must be a non-negative number of seconds, got {base_s!r}")
    return base_s * timeout_scale().factor


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """'30', '30s', '500ms', '2m', '1h' -> seconds. Raises ValueError with the text on anything else."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration (e.g. 30, 30s, 500ms, 2m)")
    value = float(m.group(1))
    return value * {None: 1.0, "s": 1.0, "ms": 0.001, "m": 60.0, "h": 3600.0}[m.group(2)]


@dataclass(frozen=True)
class TimeoutRule:
    """One line of the ``faultline_timeouts`` ini option: tests under `pattern` get `seconds`."""

    pattern: str
    seconds: float
    line: str


def parse_timeout_rules(lines: Iterable[str]) -> List[TimeoutRule]:
    """Parse ``PATH-OR-GLOB = DURATION`` lines (blank lines and ``#`` comments skipped).

    Raises ValueError naming the line for anything else.
    """
    rules = []
    for raw in lines:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pattern, sep, value = line.rpartition("=")
        pattern = _normalise(pattern)
        if not sep or not pattern:
            raise ValueError(f"faultline_timeouts: {line!r}: expected 'PATH-OR-GLOB = SECONDS', e.g. 'tests/ipc = 60'")
        try:
            seconds = parse_duration(value)
        except ValueError as e:
            raise ValueError(f"faultline_timeouts: {line!r}: {e}") from None
        rules.append(TimeoutRule(pattern, seconds, line))
    return rules


def _normalise(pattern: str) -> str:
    pattern = pattern.strip().replace(os.sep, "/")
    while pattern.startswith("./"):
        pattern = pattern[2:]
    return pattern.rstrip("/") or ("/" if pattern.startswith("/") else "")


def path_matches(pattern: str, relpath: str) -> bool:
    """Whether a test file at `relpath` (relative to the rootdir, '/'-separated) is under `pattern`.

    A pattern without glob characters is a path prefix on whole components ('tests/ipc' matches
    'tests/ipc/test_a.py' and 'tests/ipc/sub/test_b.py', not 'tests/ipc2/...'); a pattern with
    ``*?[`` is an fnmatch glob matched against the file and against every directory above it.
    """
    pattern = _normalise(pattern)
    if any(c in pattern for c in "*?["):
        parts = relpath.split("/")
        return any(fnmatch.fnmatchcase("/".join(parts[:i]), pattern) for i in range(1, len(parts) + 1))
    return relpath == pattern or relpath.startswith(pattern + "/")


def lookup_rule(rules: Iterable[TimeoutRule], relpath: str) -> Optional[TimeoutRule]:
    """The most specific rule for `relpath`: the longest matching pattern; the later line on a tie."""
    best = None
    for rule in rules:
        if path_matches(rule.pattern, relpath) and (best is None or len(rule.pattern) >= len(best.pattern)):
            best = rule
    return best
