"""Starting and ending the helper processes a test started (holders, CLI
subprocesses)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterable


def reap(procs: Iterable[subprocess.Popen[str]]) -> None:
    """Kill each process group still running, wait for it and close its pipes."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def interruptible() -> None:
    """``preexec_fn`` of a process a test stops with SIGINT, as Ctrl-C in a
    terminal would: SIGINT gets its default action back.  A suite run as a
    background job of a shell without job control (``cmd &`` in a script)
    starts with SIGINT ignored, every child inherits that, and Python keeps an
    ignored SIGINT ignored, so the test would wait for an exit that never comes."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
