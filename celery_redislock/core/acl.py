"""What a restricted Redis ACL user needs, and clear errors when it lacks it.

A user for celery-redislock needs the keys ``<prefix>:*`` and the commands
:func:`acl_rules` lists (docs/scaling.md shows them as one ``ACL SETUSER``).
``EVALSHA``/``SCRIPT LOAD`` run the scripts (``FCALL``/``FUNCTION LOAD``, not
required, run them as Redis Functions, see core/scripts.py), ``BLPOP`` waits for a hand-off,
``PING`` is the connection health check, ``WAIT`` and ``EVAL`` (of
``touch_fence.lua``) serve ``replicas=N``.  The rest are the commands the Lua scripts call: Redis
checks the ACL for every command a script runs.  On a Redis Cluster, add
``+cluster|slots +command`` (redis-py's discovery of the cluster; set the
user on every node); the inspection CLI also needs ``+scan``.

A denied command inside a script comes back from Redis as "The user
executing the script can't run this command", naming neither command nor
key; :func:`explain` turns it (and a denied key) into an error that names
both, and what to grant.
"""

from __future__ import annotations

import re

from redis.exceptions import NoPermissionError, ResponseError

__all__ = ["CLIENT_COMMANDS", "CLUSTER_COMMANDS", "SCRIPT_COMMANDS", "acl_rules", "explain"]

CLIENT_COMMANDS = ("evalsha", "eval", "script|load", "blpop", "ping", "wait", "subscribe")
CLUSTER_COMMANDS = ("cluster|slots", "command")
SCRIPT_COMMANDS = (
    "time",
    "get",
    "set",
    "del",
    "exists",
    "pttl",
    "pexpire",
    "rpush",
    "zadd",
    "zrem",
    "zcard",
    "zscore",
    "zrange",
    "zrangebyscore",
    "zremrangebyscore",
    "zremrangebyrank",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hexists",
    "hgetall",
    "hincrby",
    "hvals",
    "incr",
    "decr",
    "publish",
)

# Redis 7 / Valkey: "... can't run this command or subcommand script: ..., on @user_script:175.";
# Redis 6.2: "Error running script (...): @user_script:175: @user_script: 175: The user
# executing the script can't run this command or subcommand"; Valkey 9: "ACL failure in
# script: User u has no permissions to run the 'zadd' command script: on @user_script:175.".
_SCRIPT_DENIED = re.compile(r"can't run this command|ACL failure in script")
# Redis: "... to access one of the keys used as arguments"; Valkey: "... to access a key".
_KEY_DENIED = re.compile(r"\bkeys?\b")
_SCRIPT_LINE = re.compile(r"@user_(?:script|function):\s*(\d+)")
_CALL = re.compile(r"redis\.call\('(\w+)'")


def acl_rules(prefix: str = "redislock", cluster: bool = False) -> list[str]:
    """The ``ACL SETUSER`` rules (after the user name) that celery-redislock needs."""
    commands = (*CLIENT_COMMANDS, *SCRIPT_COMMANDS, *(CLUSTER_COMMANDS if cluster else ()))
    return [
        "resetkeys",
        f"~{prefix}:*",
        "resetchannels",
        f"&{prefix}:*",
        "-@all",
        *(f"+{command}" for command in commands),
    ]


def explain(exc: ResponseError, script_name: str, source: str, keys: list[str]) -> Exception | None:
    """A clearer error for an ACL denial of a script call, else None."""
    message = str(exc)
    located = _SCRIPT_LINE.search(message)
    if _SCRIPT_DENIED.search(message) and located:
        line_no = int(located.group(1))
        lines = source.splitlines()
        line = lines[line_no - 1].strip() if 0 < line_no <= len(lines) else ""
        call = _CALL.search(line)
        command = call.group(1).upper() if call else "a command"
        return NoPermissionError(
            f"Redis ACL: the user may not run {command}, which {script_name} calls "
            f"(line {line_no}: {line!r}); grant +{command.lower()} "
            f"(celery-redislock needs: {' '.join(acl_rules(_prefix(keys)))})"
        )
    if isinstance(exc, NoPermissionError) and _KEY_DENIED.search(message):
        return NoPermissionError(
            f"Redis ACL: the user may not access the keys {', '.join(keys)} used by "
            f"{script_name}; its key pattern must allow ~{_prefix(keys)}:* ({message})"
        )
    if isinstance(exc, NoPermissionError):
        return NoPermissionError(
            f"Redis ACL: {message} (running {script_name}; celery-redislock needs: "
            f"{' '.join(acl_rules(_prefix(keys)))})"
        )
    return None


def _prefix(keys: list[str]) -> str:
    first = keys[0] if keys else ""
    return first.split(":{", 1)[0] if ":{" in first else "redislock"
