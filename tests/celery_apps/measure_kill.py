"""How long a lock stays held after its worker child is SIGKILLed.

``python -m tests.celery_apps.measure_kill`` (a throwaway redis-server and a
prefork worker; TTL 30 s, Celery's ``worker_lost_wait`` 20 s): prints the
median and max time from SIGKILL to the lock being free, over 16 kills
(half of them in bodies that block SIGTERM).  A figure, not a test.
"""

from __future__ import annotations

import os
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from celery_redislock.testing.servers import RedisServer
from tests.celery_apps.basic import create_app
from tests.celery_harness import worker_factory
from tests.waiting import wait_for


def main(rounds: int = 8) -> None:
    with RedisServer() as server, worker_factory(Path(tempfile.mkdtemp())) as start:
        config = {"redis": server.url, "prefix": f"m{uuid.uuid4().hex[:8]}", "ttl": "30"}
        app = create_app(config)
        start(config, concurrency=2)
        times = []
        for i in range(rounds):
            for name in ("sleeper", "stubborn"):
                key = f"{name}-{i}"
                task = app.tasks[f"basic.{name}"]
                task.delay(key, 60)
                [start_event] = wait_for(
                    lambda name=name, key=key: [
                        e for e in app.recorder.events(name, key) if e["what"] == "start"
                    ],
                    60,
                )
                lease_set = task.redislock_leaseset(task.redislock_name((key,), {}))
                os.kill(start_event["pid"], signal.SIGKILL)
                killed = time.monotonic()
                wait_for(lambda ls=lease_set: not ls.holders(), 30, interval=0.005)
                times.append(time.monotonic() - killed)
        print(
            f"SIGKILL -> lock free: median {statistics.median(times):.3f} s, "
            f"max {max(times):.3f} s over {len(times)} kills"
        )


if __name__ == "__main__":
    main()
