"""How long kombu's Redis transport takes to hand out an unacked message again.

kombu 5.7 reads ``unacked_restore_interval`` / ``unacked_restore_throttle``
(our test apps set them to sweep every second or faster).  kombu 5.3-5.6
restore on a fixed cadence: a pass every 10 s that scans on every 10th call
(the first at the worker's start), so about 100 s between scans.  Tests that
wait for a restored message wait this much longer than the visibility timeout.
"""

from __future__ import annotations

import kombu

KOMBU = tuple(int(part) for part in kombu.__version__.split(".")[:2])
READS_RESTORE_SETTINGS = KOMBU >= (5, 7)


def restore_cadence() -> float:
    """Seconds between the transport's restore scans, at worst, with our settings."""
    return 1.0 if READS_RESTORE_SETTINGS else 110.0


def why() -> str:
    if READS_RESTORE_SETTINGS:
        return f"kombu {kombu.__version__} reads the unacked_restore settings"
    return (
        f"kombu {kombu.__version__} restores unacked messages on a fixed cadence, "
        "one scan about every 100 s"
    )
