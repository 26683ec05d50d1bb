"""Ending the helper processes a test started (holders, CLI subprocesses)."""

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
