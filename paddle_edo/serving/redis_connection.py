"""A Redis client from a URL, checked at once, and Redis's failures told as paddle_edo errors: a server that
cannot be reached (down, restarting, loading its data) is StoreUnavailableError; anything else Redis
refuses is EdoRuntimeError. Needs redis-py (the ``serving`` extra)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from ..errors import EdoRuntimeError, EdoValueError, StoreUnavailableError

SCHEMES = ("redis", "rediss", "unix")


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def connect(url: str, timeout_s: float = 5.0):
    """A ``redis.Redis`` client for ``url`` (redis://[:password@]host:port/db, rediss://..., unix://path),
    answered a PING. Raises EdoValueError for a malformed URL, StoreUnavailableError when no server
    answers."""
    import redis
    from redis.backoff import ExponentialBackoff
    from redis.retry import Retry

    scheme = urlsplit(url).scheme if isinstance(url, str) else ""
    if scheme not in SCHEMES:
        raise EdoValueError(f"Redis URL {url!r}: it must start with {', '.join(s + '://' for s in SCHEMES)} "
                            f"(e.g. redis://127.0.0.1:6379/0)")
    try:
        client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=min(timeout_s, 2.0),
                                      retry=Retry(ExponentialBackoff(cap=0.2, base=0.02), 2),
                                      health_check_interval=0)
    except ValueError as exc:
        raise EdoValueError(f"Redis URL {shown(url)!r}: {exc}") from None
    with redis_errors(url):
        client.ping()
    return client


@contextmanager
def redis_errors(url: str, doing: str = "") -> Iterator[None]:
    """Redis's exceptions inside as paddle_edo errors naming the server (and what was being done)."""
    import redis

    what = f" while {doing}" if doing else ""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise StoreUnavailableError(f"Redis at {shown(url)} is unreachable{what}: {str(exc).rstrip('.')}") from None
    except redis.RedisError as exc:
        raise EdoRuntimeError(f"Redis at {shown(url)} refused a command{what}: {str(exc).rstrip('.')}") from None
