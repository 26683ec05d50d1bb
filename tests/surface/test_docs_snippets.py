"""Every Python snippet in README.md and docs/ runs as pasted.

Each fenced ``python`` block is run on its own, in a fresh interpreter in an
empty directory, with ``REDIS_URL`` pointing at the test Redis (the snippets
read it, defaulting to localhost).  A snippet that needs names it never
defines, or that no longer matches the API, fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def snippets() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{page.relative_to(ROOT)}:{line}", match.group(1)))
    return found


SNIPPETS = snippets()


def test_the_docs_have_snippets() -> None:
    assert len(SNIPPETS) >= 5, [where for where, _ in SNIPPETS]


@pytest.mark.parametrize("code", [code for _, code in SNIPPETS], ids=[w for w, _ in SNIPPETS])
def test_snippet_runs_as_pasted(code: str, redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REDIS_URL": redis_url}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"


def test_the_documented_acl_command_grants_exactly_what_the_library_needs() -> None:
    """docs/scaling.md's one-line ``ACL SETUSER`` is acl_rules(), as a shell would pass it."""
    import shlex

    from celery_redislock.core.acl import acl_rules

    text = (ROOT / "docs" / "scaling.md").read_text()
    [line] = [s for s in text.splitlines() if s.startswith("redis-cli ACL SETUSER")]
    words = shlex.split(line)
    assert words[:5] == ["redis-cli", "ACL", "SETUSER", "locks", "on"]
    assert words[6:] == acl_rules()
