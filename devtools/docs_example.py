"""Run a test file shown in the docs, as a user would paste it: ``python -m
devtools.docs_example PAGE FILENAME``.

The file is the fenced ``python`` block of ``PAGE`` whose first line is
``# FILENAME``; it is written into an empty temporary directory and run with
``pytest`` from this interpreter.  The exit status is pytest's (2 when the page
has no such block).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def block(page: Path, filename: str) -> str | None:
    """The python block of ``page`` that starts with ``# filename``, if any."""
    for match in FENCE.finditer(page.read_text()):
        if match.group(1).startswith(f"# {filename}\n"):
            return match.group(1)
    return None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m devtools.docs_example PAGE FILENAME", file=sys.stderr)
        return 2
    page, filename = Path(argv[0]), argv[1]
    code = block(page, filename)
    if code is None:
        print(f"{page}: no python block starting with '# {filename}'", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / filename).write_text(code)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", filename]
        return subprocess.run(command, cwd=folder, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
