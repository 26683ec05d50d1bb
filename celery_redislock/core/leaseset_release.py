"""Giving a lease set's slot back, and renewing it: the hand-off side.

:class:`LeaseSetRelease` is the part of
:class:`~celery_redislock.core.leaseset.LeaseSet` that ends or extends a
lease: ``release()``, ``release_through()``, ``release_owner()`` and
``refresh()``.

Guaranteed:

* a release is one ``release.lua`` call, which hands the freed slot directly
  to the first live waiter(s), each admitted by its own limit, in arrival
  order (see ``lua/common.lua``): the waiter becomes the holder inside that
  call, so no newcomer can take the slot in between;
* after ``release()`` / ``release_through()`` the instance holds nothing,
  whether or not the lease was still held in Redis (``LockLost`` says it was
  not); the heartbeat stops renewing the lease before Redis is asked;
* ``refresh()`` never revives an expired lease: a lease found gone is marked
  lost and forgotten.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .errors import LockLost, NotOwned
from .heartbeat import Heartbeat
from .lease import Lease
from .scripts import RELEASE
from .validation import check_ttl

__all__ = ["LeaseSetRelease"]


class LeaseSetRelease:
    """Release, hand-off and renewal of the lease this instance holds."""

    # Set by LeaseSet (its __init__, and the class attribute ``renewer``).
    client: Any
    name: str
    renewer: Heartbeat
    _script_keys: list[bytes]
    _constant_args: tuple[bytes, ...]
    _lease: Lease | None

    def release(self) -> None:
        """Give the slot back (handing it to the next waiter).

        Raises :class:`NotOwned` if this instance holds nothing, and
        :class:`LockLost` if the lease had expired or been taken meanwhile.
        Either way the instance holds nothing afterwards.
        """
        self.release_through(
            lambda owner: bool(RELEASE(self.client, self._script_keys, self._release_args(owner)))
        )

    def release_through(self, release: Callable[[str], bool]) -> None:
        """:meth:`release`, with the Redis call made by ``release(owner)``,
        which returns True if ``owner`` held an unexpired slot.

        For a caller whose release script does more in the same round trip
        (the park policy's release also promotes parked work); it must give
        the slot back as ``release.lua`` does.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(f"release() of {self.name!r}, which this object does not hold")
        self._forget()
        held = release(lease.owner)
        if not held:
            raise LockLost(
                f"lease on {self.name!r} (fencing token {lease.token}) expired or was taken "
                "before release"
            )

    def refresh(self, ttl: float | None = None) -> bool:
        """Renew the lease to ``ttl`` (default: the instance's ttl) from now.

        True if renewed.  False if the lease was already gone (it is then
        marked lost and the instance holds nothing); an expired lease is
        never revived.  Raises :class:`NotOwned` if nothing is held.
        """
        lease = self._lease
        if lease is None:
            raise NotOwned(f"refresh() of {self.name!r}, which this object does not hold")
        if ttl is not None:
            lease.ttl = check_ttl(ttl)
            self.renewer.add(lease)  # renew at the new pace from now on
        sent_at = time.monotonic()
        if lease.renew() > 0:
            lease.confirm(sent_at)
            return True
        lease.mark_lost("gone at refresh: expired, deleted, or Redis lost its data")
        self._forget()
        return False

    def release_owner(self, owner: str) -> bool:
        """Release the slot (or queue place) of ``owner``, whoever holds it locally.

        For cleaning up after a holder that cannot release itself (a worker
        child killed mid-task).  True if ``owner`` held an unexpired slot.
        """
        return bool(RELEASE(self.client, self._script_keys, self._release_args(owner)))

    def _release_args(self, owner: str) -> list[Any]:
        wait_ms = self._constant_args[2]
        return [owner, wait_ms]

    def _forget(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()
            self.renewer.discard(lease)
