"""The park of one lock name in Redis: its waiting work, reservations and token fates.

Celery-free: a parked *envelope* is an opaque string (the Celery layer stores
a message in it), and every method is one Lua call (``park_*.lua``; their
KEYS are :meth:`ParkKeys.park_script_keys`).  The model, per name::

    park      FIFO of waiting entries (task id, limit, expiry, envelope)
    inflight  reservations: a slot held for a promoted entry until its
              message arrives (a token and a deadline)
    tokens    fates of promotion tokens that left flight (stale / claimed)

Guaranteed (single Redis, or one cluster slot per name): at most ``limit``
holders and reservations together; a reservation lapses at its deadline and
is handed out again with a new token, so a copy carrying an older token is
refused; every decision reads the clock of Redis (``TIME``), never the
caller's.  On a cluster the index of names lives in its own slot and is
updated from each reply (``Parking._follow`` says what is and is not
guaranteed there); the total over all
names (:attr:`ParkConfig.max_total`) needs a single server.

Waiting *until a slot frees* is what the park does today.  Waiting *until a
time* (a rate limit's "eligible at") fits the same model: an entry's due time
joins its expiry, promotion takes the head only once it is due, and the index
is scored by the earliest due time so a sweeper can sleep until then
(docs/park.md, "Waiting until a time").
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from .capacity import Capacity
from .heartbeat import is_cluster
from .keys import limits_to_wake, park_index, park_keys, revoke_record
from .leaseset import WAIT_LEASE
from .park_types import (
    Dropped,
    Outcome,
    ParkConfig,
    ParkStatus,
    Promotion,
    PromotionKind,
    Verdict,
)
from .rate import NO_RATE, Rate, RateTerms
from .scripts import (
    LIMIT_CHANGED,
    PARK_ARRIVE,
    PARK_CLAIM,
    PARK_DROP,
    PARK_DUE,
    PARK_ENQUEUE,
    PARK_HEAD,
    PARK_HOLD,
    PARK_INSPECT,
    PARK_PROMOTE,
    PARK_RELEASE,
    PARK_TRY,
    PARK_UNHOLD,
    PARK_WAKE,
    PARK_WHERE,
    STATE_FREE,
    STATE_HOLD,
    LuaScript,
    text,
)

__all__ = [
    "PROMOTE_BATCH",
    "REVOKE_MEMORY",
    "Dropped",
    "Outcome",
    "ParkConfig",
    "ParkStatus",
    "Parking",
    "Promotion",
    "PromotionKind",
    "Verdict",
    "due_names",
    "indexed_names",
    "room_came_back",
    "wake",
]

#: reservations one promotion call hands out at most
PROMOTE_BATCH = 100
#: seconds a revoke record of a parked task is kept
REVOKE_MEMORY = 7 * 24 * 3600


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


WAIT_LEASE_MS = _ms(WAIT_LEASE)


def _encoded(capacity: Capacity | None) -> int:
    """The caller's capacity as the scripts take it; 0: not known (the
    sweeper), so every parked entry is admitted by the limit it was parked with."""
    return capacity.encoded if capacity is not None else 0


@functools.lru_cache(maxsize=64)
def _park_options(config: ParkConfig, cluster: bool, seen: bool = True) -> str:
    """``config``'s options of a call that parks as one JSON argument
    (``park_call.lua``), only those set; "" for none (the script decodes nothing).
    ``seen``: whether the caller's task states reach anyone (a result backend
    or events); if not, the script takes no state guard for ``PARKED``."""
    if config.max_total and cluster:
        raise ValueError(
            "redislock_park_max_total needs a single Redis server: on a cluster the "
            "total over all names spans slots (use redislock_park_max per name)"
        )
    options = {
        "keep_latest": config.keep_latest,
        "max_parked": config.max_parked,
        "max_total": config.max_total,
        "debounce_ms": _ms(config.debounce) if config.debounce > 0 else 0,
        "debounce_max_ms": _ms(config.debounce_max) if config.debounce_max > 0 else 0,
        "supersede": config.supersede,
        "unseen": not seen,
    }
    chosen = {name: value for name, value in options.items() if value}
    return json.dumps(chosen, separators=(",", ":")) if chosen else ""


def _field(value: str) -> str:
    """``value`` as a field of a park entry, whose fields are separated by ``|``."""
    return value.replace("|", "/")


#: The park scripts that may leave parked or in-flight work on a name that
#: had none, and so may have no entry in the index: on a Cluster the name is
#: added to the index before them.  The others (a claim, a release, a
#: promotion, a drop) find work there already, which put the name in the
#: index, or leave none.
_REGISTER_FIRST = frozenset({PARK_ENQUEUE, PARK_ARRIVE, PARK_TRY, PARK_HEAD})

#: The due time ``park_release.lua`` replies when nothing was parked or in
#: flight before it (so the name has no index entry to update)
NOTHING_BEFORE = -2


def _promotions(items: Sequence[Any]) -> list[Promotion]:
    return [
        Promotion(PromotionKind(text(kind)), text(task_id), int(token), text(envelope), text(guard))
        for kind, task_id, token, envelope, guard in zip(*[iter(items)] * 5, strict=True)
    ]


class Parking:
    """The park operations of one name: each method is one Lua call."""

    def __init__(self, client: Any, prefix: str, name: str) -> None:
        self.client = client
        self.prefix = prefix
        self.name = name
        self.cluster = is_cluster(client)
        self.keys = park_keys(prefix, name)
        self._script_keys = self.keys.park_script_keys(self.cluster)

    @property
    def index(self) -> str:
        return park_index(self.prefix)

    def _call(self, script: LuaScript, args: list[Any], revoke_record_of: str = "") -> Any:
        """One park script on this name; ``revoke_record_of``: a task id whose
        revoke record the script reads first (KEYS[20], a single server only:
        on a cluster the record is in another slot, and :meth:`claim` and
        :meth:`arrive` read it before)."""
        if self.cluster and script in _REGISTER_FIRST:
            # Registered first, so a crash after the call cannot leave parked
            # work out of the index; the reply's due time corrects the score.
            self.client.zadd(self.index, {self.name: 0}, nx=True)
        keys = self._script_keys
        if revoke_record_of and not self.cluster:
            keys = [*keys, revoke_record(self.prefix, revoke_record_of)]
        reply = script(self.client, keys, [self.name, *args])
        if self.cluster:
            due = reply[0] if script in (PARK_PROMOTE, PARK_RELEASE, PARK_UNHOLD) else reply[-1]
            self._follow(script, int(due))
        return reply

    def _follow(self, script: LuaScript, due: int) -> None:
        """On a Cluster, bring the index in line with a park script's reply.

        These writes are not ordered with other processes' scripts on the
        name, so whether the name is in the index is decided by what the
        name holds, not by which write lands last:

        * after a script that may make work from none (``_REGISTER_FIRST``),
          which registered the name before it, the due time is set;
        * after any other script the due time updates the entry only if it
          is still there (``ZADD XX``, with a ``ZSCORE`` in the same round
          trip to tell), and a removal takes it out;
        * whenever the entry is found gone or taken out, an ``EXISTS`` of the
          name's parked and in-flight work follows, and the name goes back
          (score 0: the next sweep looks at it) if there is any.  So a late
          due time does not put an emptied name back, a late removal does
          not hide work that came in meanwhile, and a removal whose process
          died before its ``EXISTS`` is mended by the next call on the name.

        Not guaranteed: the score itself. A late due time overwrites a newer
        one, so the sweeper may look early (harmless) or late, by at most
        the late reply's due time (a holder's expiry, a reservation's
        deadline, a rate's wait); a name emptied while a register-first call
        was in flight can stay indexed until its due time, when a sweep
        finds nothing and takes it out; and a register-first caller that
        dies after its script, when a removal took its registration out
        before the script, leaves its work out of the index until the next
        call on the name.
        """
        if due == NOTHING_BEFORE:
            return  # nothing was parked or in flight: no entry to update
        if due >= 0 and script in _REGISTER_FIRST:
            self.client.zadd(self.index, {self.name: due})
            return
        if due >= 0:
            pipe = self.client.pipeline(transaction=False)
            pipe.zscore(self.index, self.name)
            pipe.zadd(self.index, {self.name: due}, xx=True)
            if pipe.execute()[0] is not None:
                return
        else:
            self.client.zrem(self.index, self.name)
        if self.client.exists(self.keys.park, self.keys.inflight):
            self.client.zadd(self.index, {self.name: 0}, nx=True)

    def enqueue(
        self,
        task_id: str,
        capacity: Capacity,
        envelope: str,
        expires_in: float,
        config: ParkConfig,
        task_name: str = "",
        rate: RateTerms = NO_RATE,
        seen: bool = True,
    ) -> Outcome:
        """At publish (``park_enqueue.lua``): RESERVED (publish with the token;
        the slot and the rate's units are taken), PARKED (no slot, or the rate
        or a pause does not admit it now), DUPLICATE or BOUNDED / BOUNDED_TOTAL
        (nothing stored).  ``seen``: whether the caller's task states reach
        anyone; if not, a PARKED reply holds no state guard (``guard`` "")."""
        reply = self._call(
            PARK_ENQUEUE,
            [
                task_id,
                capacity.encoded,
                envelope,
                _ms(expires_in) if expires_in > 0 else 0,
                _ms(config.deadline),
                _field(task_name),
                *rate.script_args(),
                _park_options(config, self.cluster, seen),
            ],
        )
        return Outcome.of(reply)

    def arrive(
        self,
        task_id: str,
        capacity: Capacity,
        envelope: str,
        expires_in: float,
        config: ParkConfig,
        owner: str,
        ttl: float,
        meta: str,
        task_name: str = "",
        rate: RateTerms = NO_RATE,
        mark: str = "",
        seen: bool = True,
    ) -> Outcome:
        """A message without a reservation reached a worker (``park_arrive.lua``):
        HELD (``owner`` holds the slot for ``ttl``), PARKED, DUPLICATE, BOUNDED*,
        or REVOKED (the task's revoke record exists: nothing taken).  ``mark``:
        this copy's (``parking.message.copy_token``), whose stale fate an
        earlier run of the task in the same process left is dropped.
        ``seen``: as :meth:`enqueue`'s."""
        if self.cluster and self.is_revoked(task_id):
            return Outcome(Verdict.REVOKED)
        reply = self._call(
            PARK_ARRIVE,
            [
                task_id,
                capacity.encoded,
                envelope,
                _ms(expires_in) if expires_in > 0 else 0,
                owner,
                _ms(ttl),
                meta,
                _field(task_name),
                *rate.script_args(),
                _park_options(config, self.cluster, seen),
                mark,
            ],
            revoke_record_of=task_id,
        )
        return Outcome.of(reply)

    def try_hold(
        self, capacity: Capacity, owner: str, ttl: float, meta: str, rate: RateTerms
    ) -> Outcome:
        """A run of a policy that does not park (``park_try.lua``): HELD (the
        slot and the rate's units, together), FULL (no slot) or RATE (admitted
        in ``wait`` seconds); nothing is taken unless HELD."""
        reply = self._call(PARK_TRY, [capacity.encoded, owner, _ms(ttl), meta, *rate.script_args()])
        return Outcome.of(reply)

    def park_at_head(
        self,
        task_id: str,
        capacity: Capacity,
        envelope: str,
        expires_in: float,
        pause: float,
        task_name: str,
        rate: RateTerms,
        token: str = "",
        hold: float = 0.0,
        waits_for: str = "",
        fence: int = 0,
    ) -> Outcome:
        """A running task puts itself back ahead of all parked work of the name
        and pauses the name for ``pause`` seconds (a pause only lengthens;
        ``park_head.lua``): PARKED, with ``wait`` the pause left.  ``token``: the
        promotion token the run was claimed with, if any; it becomes stale, so a
        copy of the run's message (redelivered after a crash) never runs: the
        park has the task.  ``hold``: instead of (or besides) a pause, nothing
        parked of the name is promoted for this many seconds, unless
        :meth:`unhold` for ``waits_for`` lifts it first (a run refused by the
        full listed limit ``waits_for``).  ``fence`` (the run's fencing
        token; 0: none): a ``keep_latest`` run the limit refused goes back as
        the name's pending call, which a newer call replaces; SUPERSEDED
        (``reason``: the id of the call parked already, which takes its
        place now) when there is one, unless that call is a run put back the
        same way with a lower fencing token, which it replaces (``replaced``)."""
        reply = self._call(
            PARK_HEAD,
            [
                task_id,
                capacity.encoded,
                envelope,
                _ms(expires_in) if expires_in > 0 else 0,
                _field(task_name),
                *rate.script_args(),
                _ms(pause) if pause > 0 else 0,
                token,
                _ms(hold) if hold > 0 else 0,
                waits_for,
                fence,
            ],
        )
        return Outcome.of(reply)

    def where(self, task_id: str, token: str = "") -> tuple[str, str]:
        """Where ``task_id`` is: ``"parked"``, ``"inflight"`` (promoted, its
        message on its way) or ``""`` (neither: never parked, or claimed since);
        and the fate of its promotion ``token``: ``"stale"`` (that copy never
        runs), ``"claimed"`` or ``""`` (none recorded, or no token)."""
        keys = [self.keys.parked, self.keys.inflight, self.keys.tokens]
        where, fate = PARK_WHERE(self.client, keys, [task_id, token])
        return text(where), text(fate)

    def claim(
        self,
        task_id: str,
        token: str,
        owner: str,
        ttl: float,
        meta: str,
        capacity: Capacity,
        task_name: str = "",
    ) -> Outcome:
        """A promoted message arrived: HELD (its reservation became ``owner``'s
        lease), PARKED (sent back: the name is over a lowered limit), DROP, or
        REVOKED (the task's revoke record exists: nothing taken)."""
        if self.cluster and self.is_revoked(task_id):
            return Outcome(Verdict.REVOKED)
        reply = self._call(
            PARK_CLAIM,
            [task_id, token, owner, _ms(ttl), meta, capacity.encoded, _field(task_name)],
            revoke_record_of=task_id,
        )
        return Outcome.of(reply)

    def promote(
        self,
        capacity: Capacity | None,
        config: ParkConfig,
        task_name: str = "",
        seen: bool = True,
    ) -> list[Promotion]:
        """Fill the free slots; ``capacity`` and ``task_name`` are the caller's (None
        and "" for the sweeper): parked tasks of that name are admitted by
        ``capacity``, others by their own limit from when they were parked.
        ``seen``: as :meth:`release`'s."""
        reply = self._call(
            PARK_PROMOTE,
            [
                capacity.encoded if capacity else 0,
                _ms(config.deadline),
                PROMOTE_BATCH,
                _field(task_name),
                config.max_publishes,
                int(seen),
            ],
        )
        return _promotions(reply[1:])

    def hold_for(self, limit: str, seconds: float) -> bool:
        """Hold the name's parked work for the listed limit ``limit`` for at
        most ``seconds`` (as :meth:`park_at_head` does, without a task), if
        anything is parked; returns whether it was (``park_hold.lua``)."""
        return bool(self._call(PARK_HOLD, [_ms(seconds), limit])[0])

    def unhold(
        self, config: ParkConfig, limit: str, hold: float = 0.0, seen: bool = True
    ) -> tuple[list[Promotion], bool]:
        """Lift the hold :meth:`park_at_head` set for the listed limit
        ``limit`` (not one for another limit) and promote one parked task, as
        :meth:`promote` does for the sweeper (``park_unhold.lua``): one slot
        of the limit came back, so one task, not as many as its own slots
        allow (the others would be sent back by the limit).  With ``hold``
        (seconds), the rest is held for the limit again once one was
        promoted.  Returns the promotions and whether it held the rest.
        ``seen``: as :meth:`release`'s."""
        reply = self._call(
            PARK_UNHOLD,
            [
                0,
                _ms(config.deadline),
                1,
                "",
                config.max_publishes,
                limit,
                _ms(hold) if hold else 0,
                int(seen),
            ],
        )
        return _promotions(reply[2:]), bool(reply[1])

    def release(
        self,
        owner: str,
        capacity: Capacity | None,
        config: ParkConfig,
        task_name: str = "",
        seen: bool = True,
    ) -> tuple[bool, list[Promotion]]:
        """Release ``owner``'s slot (as ``release.lua``) and promote into the
        freed slots (as :meth:`promote`), in one call; returns whether it held,
        and the promotions.  ``seen``: whether the caller's task states reach
        anyone; if not, no promotion holds a state guard (``guard`` "")."""
        held, promotions, _ = self.release_making_way(owner, capacity, config, task_name, seen=seen)
        return held, promotions

    def release_making_way(
        self,
        owner: str,
        capacity: Capacity | None,
        config: ParkConfig,
        task_name: str = "",
        limit: str = "",
        hold: float = 0.0,
        seen: bool = True,
    ) -> tuple[bool, list[Promotion], bool]:
        """:meth:`release`, and before anything is promoted, hold the parked
        work for the listed limit ``limit`` for ``hold`` seconds at most (as
        :meth:`hold_for`): the run gave its slot of that limit to a name that
        waited for it, and makes way.  Returns whether it held, the
        promotions, and whether the parked work is now held for ``limit``."""
        reply = self._call(
            PARK_RELEASE,
            [
                owner,
                WAIT_LEASE_MS,
                _encoded(capacity),
                _ms(config.deadline),
                PROMOTE_BATCH,
                _field(task_name),
                config.max_publishes,
                _ms(hold) if limit else 0,
                limit,
                int(seen),
            ],
        )
        return bool(reply[1]), _promotions(reply[3:]), bool(reply[2])

    def drop(self, task_id: str, token: str = "") -> Dropped:
        """Remove ``task_id`` (parked, or in flight with ``token`` if given)."""
        reply = self._call(PARK_DROP, [task_id, token])
        return Dropped(text(reply[0]), text(reply[1]))

    def status(self, count: int = 0) -> ParkStatus:
        """Counts, and the first ``count`` parked entries and promotions in flight."""
        (
            now_ms,
            parked,
            oldest,
            inflight,
            overdue,
            listed,
            promoted,
            pause_ms,
            head_ms,
            interval_us,
            burst,
            limit,
            waits_for,
        ) = PARK_INSPECT(self.client, self._script_keys, [self.name, count])
        now = int(now_ms)
        entries = [
            {**_listed(listed, i, now), "expires_in": _until(listed[i + 2], now)}
            for i in range(0, len(listed), 4)
        ]
        in_flight = [
            {**_listed(promoted, i, now), "deadline_in": _until(promoted[i + 2], now)}
            for i in range(0, len(promoted), 4)
        ]
        return ParkStatus(
            self.name,
            int(parked),
            (now - int(oldest)) / 1000 if int(oldest) else None,
            int(inflight),
            int(overdue),
            entries,
            in_flight,
            int(pause_ms) / 1000,
            int(head_ms) / 1000,
            Rate(1, int(interval_us) / 1e6) if int(interval_us) else None,
            int(burst) or 1,
            int(limit) or None,
            text(waits_for) or None,
        )

    # -- the guard of result-backend writes (parking/states.py) --------------

    def hold_state(self, task_id: str, holder: str, needs: str, ttl: float) -> int:
        """Take the right to write ``task_id``'s state if the decision behind it
        still holds (``needs``: ``"parked"``, ``"inflight"`` or ``""``): 1 held,
        0 held by another write (try again), -1 the decision no longer holds."""
        keys = [self.keys.state_guard(task_id), self.keys.parked, self.keys.inflight]
        return int(STATE_HOLD(self.client, keys, [task_id, holder, _ms(ttl), needs]))

    def free_state(self, task_id: str, holder: str) -> None:
        STATE_FREE(self.client, [self.keys.state_guard(task_id)], [holder])

    # -- revoke records: one per task id, beside the names' keys ------------

    def record_revoke(self, task_id: str) -> None:
        """Remember that ``task_id`` is revoked (:data:`REVOKE_MEMORY` seconds)."""
        self.client.set(revoke_record(self.prefix, task_id), 1, ex=REVOKE_MEMORY)

    def is_revoked(self, task_id: str) -> bool:
        return bool(self.client.exists(revoke_record(self.prefix, task_id)))


def due_names(
    client: Any, prefix: str, count: int = 1000, hold: float = 1.0
) -> tuple[list[str], float | None]:
    """Names of the index due now (``park_due.lua``), each held from other
    sweepers for ``hold`` seconds unless its promotion re-scores it first,
    and the seconds until the index's earliest time after that (None: empty)."""
    reply = PARK_DUE(client, [park_index(prefix)], [count, _ms(hold)])
    next_ms = int(reply[0])
    return [text(raw) for raw in reply[1:]], None if next_ms < 0 else next_ms / 1000


def wake(client: Any, prefix: str, name: str) -> bool:
    """Have the sweepers look at ``name`` now (its pause was lifted); returns
    whether it has parked or in-flight work (``park_wake.lua``)."""
    return bool(int(PARK_WAKE(client, [park_index(prefix)], [name])))


def room_came_back(client: Any, prefix: str, name: str) -> None:
    """A slot of ``name`` came back outside a worker's release (a run-time
    override, a forced release from the CLI): have the sweepers look at its
    parked work now (``park_wake.lua``) and wake the keys whose parked heads
    wait for it as a listed limit (``limit_changed.lua``; their sweepers run
    ``wake_changed_limits``)."""
    wake(client, prefix, name)
    LIMIT_CHANGED(client, [park_index(prefix), limits_to_wake(prefix)], [name])


def indexed_names(client: Any, prefix: str) -> list[str]:
    """Every name of the index (parked or in-flight work), sorted."""
    return sorted(text(n) for n in client.zrange(park_index(prefix), 0, -1))


def _listed(items: Sequence[Any], i: int, now_ms: int) -> dict[str, Any]:
    """One listed entry of ``park_inspect.lua``: task id, enqueue time, envelope.
    The envelope is read as JSON for its ``task`` and ``headers.argsrepr``
    (what the Celery layer stores); anything else shows as unknown."""
    try:
        env = json.loads(text(items[i + 3]))
    except ValueError:
        env = {}
    env = env if isinstance(env, dict) else {}
    return {
        "task_id": text(items[i]),
        "task": env.get("task"),
        "age": (now_ms - int(items[i + 1])) / 1000,
        "argsrepr": (env.get("headers") or {}).get("argsrepr"),
    }


def _until(ms: Any, now_ms: int) -> float | None:
    """Seconds from ``now_ms`` to the Redis time ``ms`` (None for 0: never)."""
    return (int(ms) - now_ms) / 1000 if int(ms) else None
