"""Owner ids: who holds a lease, in one format.

An owner id is ``<prefix><32 random hex digits>``.  The random part makes
every acquisition its own owner (only it can release or renew).  The prefix
says whose acquisition it is; for a task execution it is
:func:`execution_prefix`: the task id, this host and the pid of the process
that runs it, so the worker's main process can find what a dead child held
without touching a redelivered execution of the same task elsewhere.
"""

from __future__ import annotations

import re
import secrets
import socket
import zlib

__all__ = ["HOSTNAME", "execution_prefix", "execution_tag", "new_owner"]

HOSTNAME = socket.gethostname()
_HOST_TAG = f"{zlib.crc32(HOSTNAME.encode('utf-8')):08x}"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def new_owner(prefix: str) -> str:
    """A fresh owner id under ``prefix``."""
    return prefix + secrets.token_hex(16)


def execution_tag(task_id: str) -> str:
    """The part of an execution's owner ids that names the task id."""
    return _UNSAFE.sub("_", str(task_id))[:64] + "."


def execution_prefix(task_id: str, pid: int) -> str:
    """Owner-id prefix of the leases one execution holds: task id, host, pid."""
    return f"{execution_tag(task_id)}{_HOST_TAG}.{pid}."
