"""Key templates, canonical values and bad input: errors at definition or call time.

No worker is needed: every error here must happen before a message is sent.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import math
import time
import uuid
from typing import Any

import pytest
import redis
from celery import Celery

from celery_redislock import LockContended, LockedTask, RedisLock, SemaphoreTask
from celery_redislock.enqueue.naming import MAX_KEY_LENGTH, canonical


@pytest.fixture
def app(redis_url: str, prefix: str) -> Celery:
    app = Celery("keys", broker="memory://", set_as_current=False)
    app.conf.update(redislock_url=redis_url, redislock_prefix=prefix)
    app.finalize()
    return app


def unique_task(app: Celery, **options: Any) -> Any:
    """``app.task`` with a fresh name (task names are global to the process)."""
    return app.task(name=f"keys.{uuid.uuid4().hex}", shared=False, **options)


class Color(enum.Enum):
    RED = "red"


def test_positional_keyword_and_default_calls_give_one_key(app: Celery) -> None:
    @unique_task(
        app, base=SemaphoreTask, semaphore_key="acct:{account_id}:{since}", semaphore_limit=2
    )
    def sync_account(account_id: int, since: Any = None) -> None: ...

    name = sync_account.redislock_name
    assert name((7,), {}) == name((), {"account_id": 7}) == name((7, None), {}) == "acct:7:null"
    assert name((7,), {"since": "2024"}) == "acct:7:2024"


def test_bound_tasks_bind_without_self(app: Celery) -> None:
    @unique_task(app, bind=True, base=LockedTask, lock_key="cache:{user_id}")
    def refresh(self: Any, user_id: int) -> None: ...

    assert refresh.redislock_name((3,), {}) == "cache:3"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (7, "7"),  # deliberate: ids arriving as strings share the key
        (uuid.UUID(int=5), str(uuid.UUID(int=5))),
        (decimal.Decimal("1.10"), decimal.Decimal("1.1")),
        (decimal.Decimal("100"), decimal.Decimal("1E+2")),
        (
            dt.datetime(2024, 1, 1, 12, tzinfo=dt.timezone.utc),
            dt.datetime(2024, 1, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        ),
        (Color.RED, "red"),
    ],
)
def test_equal_values_give_equal_keys(a: object, b: object) -> None:
    assert canonical(a) == canonical(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [(True, 1), (None, "None"), (1.0, 1), ("a:b", "a%3Ab"), (dt.date(2024, 1, 2), "2024-01-03")],
)
def test_different_values_give_different_keys(a: object, b: object) -> None:
    assert canonical(a) != canonical(b)


def test_values_cannot_forge_separators_or_hash_tags(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="k:{a}:{b}")
    def two(a: str, b: str) -> None: ...

    assert two.redislock_name(("1:2", "3"), {}) != two.redislock_name(("1", "2:3"), {})
    name = two.redislock_name(("{x}", "%"), {})
    assert "{" not in name and "}" not in name


def test_long_keys_are_hashed_and_stay_distinct(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="k:{a}")
    def one(a: str) -> None: ...

    first, second = one.redislock_name(("x" * 500,), {}), one.redislock_name(("x" * 499,), {})
    assert len(first) <= MAX_KEY_LENGTH and len(second) <= MAX_KEY_LENGTH
    assert first != second and "sha256:" in first


def test_callable_key(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key=lambda args, kwargs: f"custom:{args[0] * 2}")
    def doubled(n: int) -> None: ...

    assert doubled.redislock_name((21,), {}) == "custom:42"


# -- bad input ----------------------------------------------------------------


def test_missing_template_field_fails_at_definition_on_a_finalized_app(app: Celery) -> None:
    with pytest.raises(ValueError, match=r"\{user\} is not a parameter of the task"):

        @unique_task(app, base=LockedTask, lock_key="cache:{user}")
        def refresh(user_id: int) -> None: ...


def test_missing_template_field_fails_when_the_app_finalizes(redis_url: str) -> None:
    lazy = Celery("lazy", broker="memory://", set_as_current=False)

    @unique_task(lazy, base=LockedTask, lock_key="cache:{user}")
    def refresh(user_id: int) -> None: ...

    # Celery creates task classes lazily: at finalize (worker start, first
    # use), before anything can run.
    with pytest.raises(ValueError, match=r"\{user\} is not a parameter"):
        lazy.finalize()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"lock_key": "a:{x.y}"}, ValueError, "plain parameter name"),
        ({"lock_key": "a:{x!r}"}, ValueError, "plain parameter name"),
        ({"lock_key": "a:{args}"}, ValueError, "not a parameter"),
        ({"lock_key": ""}, TypeError, "non-empty"),
        ({"lock_key": 5}, TypeError, "template or a callable"),
        ({}, TypeError, "needs lock_key"),
        ({"lock_key": "a:{x}", "lock_policy": "maybe"}, ValueError, "lock_policy must be one of"),
        ({"lock_key": "a:{x}", "lock_ttl": 0}, ValueError, "positive"),
        ({"lock_key": "a:{x}", "lock_retry_max": -1}, ValueError, "lock_retry_max"),
        ({"lock_key": "a:{x}", "lock_retry_max": "3"}, TypeError, "lock_retry_max"),
        # A countdown Celery cannot turn into an ETA would fail in the requeue.
        ({"lock_key": "a:{x}", "lock_retry_countdown": math.nan}, ValueError, "countdown"),
        ({"lock_key": "a:{x}", "lock_retry_countdown": math.inf}, ValueError, "countdown"),
        ({"lock_key": "a:{x}", "lock_retry_countdown": 1e12}, ValueError, "countdown"),
        ({"lock_key": "a:{x}", "lock_retry_countdown": -1}, ValueError, "countdown"),
        ({"lock_key": "a:{x}", "lock_retry_countdown": "1"}, TypeError, "countdown"),
        ({"lock_key": "a:{x}", "lock_retry_jitter": math.nan}, ValueError, "jitter"),
        ({"lock_key": "a:{x}", "lock_retry_jitter": math.inf}, ValueError, "jitter"),
        ({"lock_key": "a:{x}", "lock_retry_jitter": True}, TypeError, "jitter"),
        # "False" is a true string: de-duplication must not be switched on by it.
        ({"lock_key": "a:{x}", "lock_dedupe": "False"}, TypeError, "lock_dedupe must be a bool"),
        ({"lock_key": "a:{x}", "lock_dedupe": 1}, TypeError, "lock_dedupe must be a bool"),
        (
            {"lock_key": "a:{x}", "lock_policy": "keep_latest", "lock_dedupe": True},
            ValueError,
            "lock_dedupe does not combine with lock_policy='keep_latest'",
        ),
        ({"lock_key": "a:{x}", "lock_wait_timeout": -1}, ValueError, "lock_wait_timeout"),
        (
            {"lock_key": "a:{x}", "lock_debounce": 1},
            ValueError,
            "lock_debounce needs lock_policy='keep_latest'",
        ),
        (
            {"lock_key": "a:{x}", "lock_policy": "keep_latest", "lock_debounce": 0},
            ValueError,
            "lock_debounce",
        ),
        (
            {
                "lock_key": "a:{x}",
                "lock_policy": "keep_latest",
                "lock_debounce": 2,
                "lock_debounce_max": 1,
            },
            ValueError,
            r"lock_debounce_max \(1\) must be >= ",
        ),
        (
            {"lock_key": "a:{x}", "lock_policy": "keep_latest", "lock_debounce_max": 1},
            ValueError,
            "lock_debounce_max needs lock_debounce",
        ),
        ({"lock_key": "a:{x}", "lock_policy": "keep_lastest"}, ValueError, "keep_latest"),
        (
            {"lock_key": "a:{x}", "lock_throttle": 1},
            ValueError,
            "lock_throttle needs lock_policy='keep_latest'",
        ),
        (
            {"lock_key": "a:{x}", "lock_policy": "keep_latest", "lock_throttle": 1, "rate": "2/s"},
            ValueError,
            "set lock_throttle or rate, not both",
        ),
        (
            {
                "lock_key": "a:{x}",
                "lock_policy": "keep_latest",
                "lock_throttle": 1,
                "lock_debounce": 1,
            },
            ValueError,
            "set lock_throttle or lock_debounce, not both",
        ),
        (
            {"lock_key": "a:{x}", "lock_throttle_trailing": False},
            ValueError,
            "lock_throttle_trailing needs lock_throttle",
        ),
        (
            {
                "lock_key": "a:{x}",
                "lock_policy": "keep_latest",
                "lock_throttle": 1,
                "lock_throttle_trailing": "no",
            },
            TypeError,
            "must be a bool",
        ),
        (
            {"lock_key": "a:{x}", "lock_policy": "keep_latest", "lock_throttle": -1},
            ValueError,
            "lock_throttle",
        ),
    ],
)
def test_bad_locked_task_options(
    app: Celery, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):

        @unique_task(app, base=LockedTask, **options)
        def task(x: int, *args: Any) -> None: ...


@pytest.mark.parametrize(
    ("base", "options", "match"),
    [
        (
            LockedTask,
            {"lock_key": "a:{x}", "lock_polcy": "wait"},
            r"'lock_polcy' is not an option of LockedTask; did you mean 'lock_policy'\?",
        ),
        (
            SemaphoreTask,
            {"semaphore_key": "a:{x}", "semaphore_limit": 2, "lock_key": "a:{x}"},
            "'lock_key' is not an option of SemaphoreTask but of LockedTask; "
            "SemaphoreTask takes 'semaphore_key'",
        ),
        (LockedTask, {"lock_key": "a:{x}", "semaphore_limit": 2}, "use base=SemaphoreTask"),
        (
            SemaphoreTask,
            {"semaphore_key": "a:{x}", "semaphore_limit": 2, "semaphore_tll": 5},
            "did you mean 'semaphore_ttl'",
        ),
        (
            LockedTask,
            {"lock_key": "a:{x}", "rate_for_each_account": "20/s"},
            r"'rate_for_each_account' is not an option of LockedTask "
            r"\(its options: lock_debounce, ",
        ),
        (
            LockedTask,
            {"lock_key": "a:{x}", "rate_key": "b:{x}", "rate": "20/s"},
            "'rate_key' is not an option of LockedTask but of RateLimitedTask",
        ),
    ],
)
def test_unknown_options_are_refused_naming_the_nearest(
    app: Celery, base: type, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(TypeError, match=match):

        @unique_task(app, base=base, **options)
        def task(x: int) -> None: ...


def test_unknown_option_of_a_lazy_app_is_refused_when_it_finalizes() -> None:
    lazy = Celery("lazy", broker="memory://", set_as_current=False)

    @unique_task(lazy, base=LockedTask, lock_key="a:{x}", lock_polcy="wait")
    def task(x: int) -> None: ...

    with pytest.raises(TypeError, match="did you mean 'lock_policy'"):
        lazy.finalize()


def test_celery_options_and_a_base_class_of_ones_own_are_accepted(app: Celery) -> None:
    class Base(LockedTask):  # type: ignore[misc]
        lock_policy = "wait"
        lock_ttl = 12.0

    @unique_task(app, base=Base, lock_key="a:{x}", rate_limit="10/s")
    def task(x: int) -> None: ...

    assert (task.lock_policy, task.lock_ttl, task.rate_limit) == ("wait", 12.0, "10/s")


@pytest.mark.parametrize(
    ("limit", "error"), [(0, ValueError), (-1, ValueError), ("2", TypeError), (None, TypeError)]
)
def test_bad_semaphore_limit(app: Celery, limit: Any, error: type[Exception]) -> None:
    with pytest.raises(error, match="semaphore_limit"):

        @unique_task(app, base=SemaphoreTask, semaphore_key="a:{x}", semaphore_limit=limit)
        def task(x: int) -> None: ...


def test_unbindable_arguments_fail_at_call_time(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="cache:{user_id}")
    def refresh(user_id: int) -> None: ...

    with pytest.raises(TypeError, match="do not bind"):
        refresh.delay(1, 2)
    with pytest.raises(TypeError, match="do not bind"):
        refresh.apply_async(kwargs={"nope": 1})
    with pytest.raises(TypeError, match="do not bind"):
        refresh.delay()


def test_unsupported_values_fail_at_call_time(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="cache:{user_id}")
    def refresh(user_id: Any) -> None: ...

    with pytest.raises(TypeError, match=r"argument 'user_id'.*has type object"):
        refresh.delay(object())
    with pytest.raises(ValueError, match="NaN"):
        refresh.delay(float("nan"))


def test_a_per_call_option_that_drops_a_promise_is_refused_at_the_call(app: Celery) -> None:
    """Debounce and supersede exist only under ``keep_latest``: a call that
    runs by another policy would drop them silently; de-duplication would
    answer a call made during a rebuild with that rebuild's result instead of
    a run after it.  A misspelt per-call option is refused, not passed on to
    the broker as a message property."""

    @unique_task(app, base=LockedTask, lock_key="d:{x}", lock_policy="keep_latest", lock_debounce=1)
    def debounced(x: int) -> None: ...

    @unique_task(
        app, base=LockedTask, lock_key="s:{x}", lock_policy="keep_latest", lock_supersede=True
    )
    def superseding(x: int) -> None: ...

    @unique_task(app, base=LockedTask, lock_key="k:{x}", lock_policy="keep_latest")
    def latest(x: int) -> None: ...

    @unique_task(app, base=LockedTask, lock_key="u:{x}", lock_dedupe=True)
    def unique(x: int) -> None: ...

    @unique_task(app, base=LockedTask, lock_key="p:{x}")
    def plain(x: int) -> None: ...

    for policy in ("skip", "park", "raise", "wait", "retry"):
        with pytest.raises(ValueError, match="without its lock_debounce"):
            debounced.apply_async((1,), lock_policy=policy)
    with pytest.raises(ValueError, match="without its lock_supersede"):
        superseding.apply_async((1,), lock_policy="park")
    with pytest.raises(ValueError, match="lock_dedupe does not combine"):
        latest.apply_async((1,), lock_dedupe=True)
    with pytest.raises(ValueError, match="lock_dedupe does not combine"):
        unique.apply_async((1,), lock_policy="keep_latest")
    # A retry of the running call (same id) claims no marker: not refused.
    unique.push_request(id="running", called_directly=False)
    try:
        unique.apply_async((1,), task_id="running", lock_policy="keep_latest")
    finally:
        unique.pop_request()
    with pytest.raises(TypeError, match="did you mean 'lock_policy'"):
        latest.apply_async((1,), lock_polcy="wait")
    # Other names pass, as Celery passes them: a canvas stamp, a mixin's option.
    plain.apply_async((1,), stamped_headers=["lock_owner"], lock_owner="ops")
    plain.apply_async((1,), lock_owner="ops")


def test_callable_key_must_return_a_valid_name(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key=lambda args, kwargs: args[0])
    def raw(n: Any) -> None: ...

    with pytest.raises(TypeError, match="returned int"):
        raw.delay(5)
    with pytest.raises(ValueError, match="must not contain"):
        raw.delay("{tag}")


def test_unknown_policy_per_call(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="cache:{user_id}")
    def refresh(user_id: int) -> None: ...

    with pytest.raises(ValueError, match="lock_policy must be one of"):
        refresh.apply_async((1,), lock_policy="sometimes")
    with pytest.raises(ValueError, match="lock_ttl"):
        refresh.apply_async((1,), lock_ttl=-5)
    with pytest.raises(TypeError, match="lock_dedupe"):
        refresh.apply_async((1,), lock_dedupe="yes")


def test_direct_call_runs_the_function_without_a_lock(app: Celery) -> None:
    @unique_task(app, base=LockedTask, lock_key="cache:{user_id}")
    def refresh(user_id: int) -> int:
        return user_id * 2

    assert refresh(4) == 8


def test_eager_execution_takes_the_lock_too(app: Celery, redis_url: str, prefix: str) -> None:
    app.conf.task_always_eager = True

    @unique_task(app, bind=True, base=LockedTask, lock_key="k:{x}")
    def locked(self: Any, x: int) -> Any:
        return self.request.redislock.token

    assert isinstance(locked.delay(1).result, int)
    holder = RedisLock(redis.Redis.from_url(redis_url), "k:1", prefix=prefix)
    assert holder.acquire()
    try:
        assert locked.delay(1).state == "IGNORED"  # skipped (EagerResult has no SKIPPED)
        failed = locked.apply_async((1,), lock_policy="raise")
        assert failed.state == "FAILURE" and isinstance(failed.result, LockContended)
    finally:
        holder.release()


@pytest.mark.parametrize(
    "coalescing",
    [
        {"lock_debounce": 0.1, "lock_debounce_max": 1},
        {"lock_throttle": 0.2},
        {"lock_throttle": 0.2, "lock_throttle_trailing": False},
        {"lock_supersede": True},
        {},
    ],
)
def test_coalescing_with_a_callable_key_runs_every_call_when_eager(
    app: Celery, coalescing: dict[str, Any]
) -> None:
    """Eager execution has no park: every call of a ``keep_latest`` task runs,
    one after the other, whatever its coalescing options (a throttled one
    waits for its window, as a rate does); the key is built by the callable."""
    app.conf.task_always_eager = True
    ran: list[float] = []

    @unique_task(
        app,
        base=LockedTask,
        lock_key=lambda args, kwargs: f"doc:{args[0]}",
        lock_policy="keep_latest",
        **coalescing,
    )
    def reindex(doc: int, n: int) -> None:
        ran.append(time.monotonic())

    assert reindex.redislock_name((7, 0), {}) == "doc:7"
    t0 = time.monotonic()
    results = [reindex.delay(7, n) for n in range(3)]
    assert [r.state for r in results] == ["SUCCESS"] * 3 and len(ran) == 3
    if "lock_throttle" in coalescing:  # the k-th start no earlier than k windows in
        assert all(t >= t0 + 0.2 * k - 0.006 for k, t in enumerate(ran)), [t - t0 for t in ran]


@pytest.mark.parametrize("form", ["naive", "aware", "iso", "iso with Z"])
def test_a_dedupe_marker_lives_through_an_eta_in_each_form_celery_takes(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lock_dedupe``'s marker lives ``lock_dedupe_ttl`` past the eta. A
    naive eta is UTC for Celery's worker, whatever the host's timezone: on
    a host whose local time is not UTC the marker must not be hours short
    or long; an ISO string is read as the worker reads it."""
    from celery_redislock.enqueue.dedupe import marker_ttl

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        due = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=100)
        eta = {
            "naive": due.replace(tzinfo=None),
            "aware": due,
            "iso": due.isoformat(),
            "iso with Z": due.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }[form]
        assert 150 < marker_ttl(60, {"eta": eta}) <= 160
    finally:
        monkeypatch.undo()  # TZ as it was, then the process's zone from it
        time.tzset()
