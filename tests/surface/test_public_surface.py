"""The documented tables match the code, so that they cannot drift apart.

The tables are found by their header row (``| method | what it does |``,
``| option | default | meaning |``, ``| setting | default | meaning |``) in
README.md or any docs/*.md, wherever a section is moved.  Checked:

* methods table: every entry exists on both RedisLock and FairSemaphore with
  the documented parameters (``name(a, b)``: a callable taking ``a`` and
  ``b``; ``name=...``: a constructor argument; ``name``: an attribute);
* task options table: every option is an attribute of LockedTask or
  SemaphoreTask (the one in parentheses, if named) with the documented
  default, and every ``lock_*``/``semaphore_*`` attribute is documented;
* Celery settings table: exactly the ``redislock_*`` settings the package reads.

The one piece of behaviour the methods table promised and FairSemaphore
lacked, ``locked()``, is checked against a real Redis at the end.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import celery
import redis

import celery_redislock
from celery_redislock import FairSemaphore, LockedTask, RateLimitedTask, RedisLock, SemaphoreTask
from celery_redislock.settings import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
ENTRY = re.compile(r"^(?P<name>\w+)(?:\((?P<params>[^)]*)\))?(?P<kwarg>=.*)?(?:\s*->.*)?$")
TASK_CLASSES = {
    "LockedTask": LockedTask,
    "SemaphoreTask": SemaphoreTask,
    "RateLimitedTask": RateLimitedTask,
}


def table(header: str) -> list[list[str]]:
    """The rows (cells) of the one table in the docs whose header row is ``header``."""
    found: list[list[list[str]]] = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if not path.exists():
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.strip() == header:
                rows = []
                for row in lines[i + 2 :]:
                    if not row.startswith("|"):
                        break
                    rows.append([cell.strip() for cell in row.strip().strip("|").split("|")])
                found.append(rows)
    assert len(found) == 1, f"expected one table headed {header!r} in the docs, found {len(found)}"
    assert found[0], f"the table headed {header!r} is empty"
    return found[0]


def code_spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_methods_table_matches_both_classes() -> None:
    checked = 0
    for cells in table("| method | what it does |"):
        for entry in code_spans(cells[0]):
            match = ENTRY.match(entry)
            assert match, f"cannot read the table entry {entry!r}"
            name, params, kwarg = match["name"], match["params"], match["kwarg"]
            for cls in (RedisLock, FairSemaphore):
                where = f"{cls.__name__}: documented {entry!r}"
                if kwarg is not None:
                    assert name in inspect.signature(cls.__init__).parameters, where
                    continue
                assert hasattr(cls, name), where
                if params is None:
                    assert not callable(getattr(cls, name)), f"{where} is a method"
                    continue
                method = getattr(cls, name)
                assert callable(method), where
                accepted = inspect.signature(method).parameters
                for param in filter(None, (p.split("=")[0].strip() for p in params.split(","))):
                    assert param in accepted, f"{where}: no parameter {param!r}"
            checked += 1
    assert checked >= 8


def _default(cell: str, cls: type) -> tuple[bool, Any]:
    """(known, value) of a default cell for ``cls``."""
    if cell == "required":
        return True, None
    for value, owner in re.findall(r"`([^`]+)`\s*\((\w+)\)", cell):
        if owner == cls.__name__:
            return True, ast.literal_eval(value)
    spans = code_spans(cell)
    if len(spans) == 1 and spans[0] == "redislock_default_ttl":
        return True, None  # falls back to the setting
    if len(spans) == 1:
        return True, ast.literal_eval(spans[0])
    return False, None


def test_task_options_table_matches_the_task_classes() -> None:
    documented: set[str] = set()
    for cells in table("| option | default | meaning |"):
        owner = re.search(r"\((\w+)\)", cells[0])
        classes = [TASK_CLASSES[owner[1]]] if owner else list(TASK_CLASSES.values())
        for name in code_spans(cells[0]):
            documented.add(name)
            having = [cls for cls in classes if hasattr(cls, name)]
            assert having, f"documented task option {name!r} is on none of {classes}"
            for cls in having:
                known, value = _default(cells[1], cls)
                assert known, f"cannot read the default {cells[1]!r} of {name!r}"
                assert getattr(cls, name) == value, (
                    f"{cls.__name__}.{name} is {getattr(cls, name)!r}, documented {value!r}"
                )
    public = {
        name
        for cls in TASK_CLASSES.values()
        for name in dir(cls)
        if name.startswith(("lock_", "semaphore_", "rate"))
        and not callable(getattr(cls, name))
        and not hasattr(celery.Task, name)  # Celery's own rate_limit
    }
    assert public - documented == set(), "task options missing from the options table"


def test_settings_table_matches_what_the_package_reads() -> None:
    documented = {code_spans(cells[0])[0] for cells in table("| setting | default | meaning |")}
    package = Path(celery_redislock.__file__).parent
    sources = "\n".join(p.read_text() for p in package.rglob("*.py"))
    read = set(re.findall(r"setting\(\s*conf,\s*\"(redislock_\w+)\"", sources))
    assert "redislock_url" in read, "found no setting read in the package"
    assert {"redislock_park_deadline", "redislock_allow_green_pool"} <= read
    assert documented == read == set(SETTINGS)  # SETTINGS: what unread_settings knows


def test_every_setting_is_read_in_settings_py_only() -> None:
    package = Path(celery_redislock.__file__).parent
    readers = {
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if re.search(r"(conf\.get|setting)\(\s*(conf,\s*)?\"redislock_", p.read_text())
    }
    assert readers == {"settings.py"}


def test_fair_semaphore_locked_means_every_slot_held(
    redis_client: redis.Redis, prefix: str
) -> None:
    first = FairSemaphore(redis_client, "surface", 2, prefix=prefix)
    second = FairSemaphore(redis_client, "surface", 2, prefix=prefix)
    assert not first.locked()
    assert first.acquire()
    assert not first.locked() and not second.locked()  # one slot left
    assert second.acquire()
    assert first.locked() and second.locked()
    first.release()
    assert not second.locked()
    second.release()


def _readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end != -1 else len(text)]


def test_readme_lists_every_signal() -> None:
    from celery_redislock import signals

    text = (ROOT / "README.md").read_text()
    paragraph = text[text.index("**Signals**") :].split("\n\n", 1)[0]
    listed = set(re.findall(r"`(lock_\w+)\(", paragraph))
    assert listed == set(signals.__all__)


def test_readme_shows_every_cli_command() -> None:
    from celery_redislock.admin.cli import redislock

    shown = set(re.findall(r"redislock ([a-z-]+)", _readme_section("## Inspection CLI")))
    assert shown == set(redislock.commands)


def test_states_and_errors_a_user_meets_are_importable_from_the_package() -> None:
    from celery_redislock.parking import PARKED, PROMOTED, ParkFull
    from celery_redislock.policies import SKIPPED

    assert celery_redislock.PARKED == PARKED == "PARKED"
    assert celery_redislock.PROMOTED == PROMOTED == "PROMOTED"
    assert celery_redislock.SKIPPED == SKIPPED
    assert celery_redislock.ParkFull is ParkFull
    assert {"PARKED", "SKIPPED", "ParkFull", "LockContended"} <= set(celery_redislock.__all__)
