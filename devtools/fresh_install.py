"""The README's first step on a machine with nothing else installed:
``python -m devtools.fresh_install``.

Creates a virtualenv of its own, runs ``pip install .`` there (the package
and its declared dependencies only: no extras, no test or dev tools), writes
the README's minimal app (``tasks.py``, ``send.py``) into an empty directory,
starts the README's ``celery ... worker`` line from that virtualenv against a
throwaway Redis (:class:`celery_redislock.testing.servers.RedisServer`, run from this
interpreter), runs ``python send.py`` from that virtualenv and checks that it
prints what the README says it prints.  Exit status 0 when it does, 1 when it
does not (the worker's log is printed), 2 when it could not be tried.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from celery_redislock.testing.servers import RedisServer

ROOT = Path(__file__).resolve().parents[1]


def readme_app() -> tuple[str, str, str, str, str]:
    """``tasks.py``, ``send.py``, the worker line, the send line and the promised output."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## Install and a minimal app")
    section = text[start : text.index("\n## ", start + 1)]
    [app_code] = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    [send_code] = re.findall(r"^```py\n(.*?)^```$", section, re.S | re.M)
    shells = re.findall(r"^```sh\n(.*?)^```$", section, re.S | re.M)
    worker_line, send_line = shells[1].strip().splitlines()
    [promised] = re.findall(r"It prints `(.*?)`", section)
    return app_code, send_code, worker_line, send_line, promised


def main() -> int:
    app_code, send_code, worker_line, send_line, promised = readme_app()
    with tempfile.TemporaryDirectory(prefix="redislock-fresh-") as folder:
        here = Path(folder)
        env_dir = here / "venv"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        installed = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", str(ROOT)],
            capture_output=True,
            text=True,
        )
        if installed.returncode != 0:
            print(f"fresh install: pip install . failed:\n{installed.stderr}", file=sys.stderr)
            return 1
        app_dir = here / "app"
        app_dir.mkdir()
        (app_dir / "tasks.py").write_text(app_code)
        (app_dir / "send.py").write_text(send_code)
        with RedisServer() as server:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CELERY_", "PYTHON"))}
            env["REDIS_URL"] = server.url
            env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
            log_path = here / "worker.log"
            with log_path.open("w") as log:
                worker = subprocess.Popen(
                    ["bash", "-c", f"exec {worker_line}"],
                    cwd=app_dir,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                try:
                    sent = subprocess.run(
                        ["bash", "-c", send_line],
                        cwd=app_dir,
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=120,
                    )
                finally:
                    os.killpg(worker.pid, signal.SIGTERM)
                    worker.wait(60)
            printed = sent.stdout.strip()
            if sent.returncode != 0 or printed != promised:
                print(
                    f"fresh install: send.py printed {printed!r}, the README promises "
                    f"{promised!r}\n{sent.stderr}\n-- worker log --\n{log_path.read_text()}",
                    file=sys.stderr,
                )
                return 1
    print(f"fresh install: `pip install .` alone runs the README's minimal app: {printed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
