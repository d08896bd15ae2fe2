"""Process bodies for the tests: module-level so that spawn and forkserver children can import them."""

import os
import time


def sleep_forever() -> None:
    time.sleep(600)


def noop() -> None:
    pass


def double_fork(write_fd: int) -> None:
    """Start a grandchild in a session of its own, report its pid, and let the middle process exit:
    the grandchild is orphaned and re-parents to the nearest subreaper (a daemon's double fork)."""
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            # As a daemon does: keep nothing of the parent's open (multiprocessing's sentinel pipe
            # among them, which would keep the parent's join() waiting for this process).
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, 65536)
            os.write(write_fd, str(os.getpid()).encode())
            time.sleep(600)
            os._exit(0)
        os._exit(0)
    os.waitpid(middle, 0)
