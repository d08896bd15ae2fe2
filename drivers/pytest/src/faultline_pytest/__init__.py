"""pytest-faultline: faultline's scenario catalog as pytest tests, and child-process helpers.

Helpers for a suite's own tests (see drivers/pytest/README.md):

- `kill_survivors(*processes)`: kill those still running (their process group), reap, return them;
- `track_children()`: a context manager that kills, on exit, every process created inside it;
- the `faultline_children` fixture: the same for one test, its leftovers killed before any fixture
  is torn down;
- `child_timeout(base_s)`: a child's timeout scaled for sanitizers and other slow environments;
- the `faultline_timeout(seconds)` marker and the `faultline_timeouts` ini option: outer timeouts.
"""

from .children import ChildProcess, ChildTracker, kill_survivors, track_children
from .timeouts import TimeoutScale, child_timeout, timeout_scale

__all__ = [
    "ChildProcess",
    "ChildTracker",
    "TimeoutScale",
    "child_timeout",
    "kill_survivors",
    "timeout_scale",
    "track_children",
]
