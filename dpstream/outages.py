"""Riding out a store that is unreachable for a while: the ledger, the checkpoints and the publish folder.

A scheduled run that has trained for an hour must not fail because its object store was unreachable for
two minutes: the run would keep its reservation (it released values already) and wait for an operator
to resume it. So every write a run cannot do without (a checkpoint, a ledger entry, a published file)
is retried while its store is *unreachable* (a refused or reset connection, a timeout, a 5xx answer) for
``OutagePolicy.window_seconds`` (10 minutes by default), waiting exponentially longer between attempts
(``tenacity``'s jittered exponential wait). Errors that another attempt cannot cure (a full disk, a
read-only or forbidden location, an object that exists, a bad document) are not retried here.

Past the window the operation raises ``StoreUnavailableError``: one line naming the store, what could not
be written and the fix. Nothing already written is lost (every write is atomic), and the reservation of a
run that released values stays in the ledger, so resuming the run (the same command and run id) is
charged nothing more.

Retries are safe because each wrapped operation is idempotent: a checkpoint or published file is
replaced whole; a ledger reservation finds its own entry (``LakeLedger.reserve``), a commit of a
committed entry does nothing. A wrapped operation that calls another wrapped one is retried once, at the
outermost call, so the window is never multiplied.
"""

from __future__ import annotations

import errno
import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import tenacity

__all__ = [
    "OutagePolicy",
    "StoreUnavailableError",
    "DEFAULT_OUTAGE_SECONDS",
    "is_unreachable",
    "rides_out",
]

DEFAULT_OUTAGE_SECONDS = 600.0

Result = TypeVar("Result")

# Exception class names (anywhere in an error's class hierarchy or its cause chain) of an unreachable
# store, from the clients fsspec's object stores use: botocore / aiobotocore (s3fs), aiohttp
# (gcsfs, adlfs, HTTP) and the standard library. Matched by name so that none of them is imported here.
_UNREACHABLE_CLASSES = frozenset(
    {
        "ConnectionError",  # builtin: refused, reset, aborted; also botocore's HTTPClientError subclasses
        "TimeoutError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ConnectTimeoutError",
        "ReadTimeoutError",
        "HTTPClientError",
        "ProxyConnectionError",
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ServerTimeoutError",
        "FSTimeoutError",
        "IncompleteRead",
        "ClientPayloadError",
        "ResponseStreamingError",
    }
)
_UNREACHABLE_ERRNOS = frozenset(
    {
        errno.ECONNREFUSED,
        errno.ECONNRESET,
        errno.ECONNABORTED,
        errno.ETIMEDOUT,
        errno.EHOSTUNREACH,
        errno.ENETUNREACH,
        errno.ENETDOWN,
        errno.EPIPE,
    }
)
# An object store's error codes for "try again later" (besides any 5xx status): throttling and timeouts.
_RETRY_LATER_CODES = frozenset(
    {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling", "ThrottlingException"}
)


def is_unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the store could not be reached (or asked to be tried again later), as opposed
    to refusing the operation: only then does another attempt have a chance."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (FileExistsError, FileNotFoundError, PermissionError, IsADirectoryError)):
            return False
        if {cls.__name__ for cls in type(current).__mro__} & _UNREACHABLE_CLASSES:
            return True
        if isinstance(current, OSError) and current.errno in _UNREACHABLE_ERRNOS:
            return True
        if _asks_to_retry(getattr(current, "response", None)):
            return True
        current = current.__cause__ or current.__context__
    return False


def _asks_to_retry(response: Any) -> bool:
    """Whether a botocore ``ClientError.response`` (s3fs keeps it as the cause of the OSError it raises) is
    a 5xx answer or a throttling code: the store is there but cannot serve now. Read by structure, never
    from message text, which may quote anything."""
    if not isinstance(response, dict):
        return False
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = str(response.get("Error", {}).get("Code", ""))
    return (isinstance(status, int) and status >= 500) or code in _RETRY_LATER_CODES or code[:1] == "5"


class StoreUnavailableError(RuntimeError):
    """A store stayed unreachable for the whole outage window: the operation was not done (nothing half
    written), and a run's reservation is kept for its resume."""


_inside = threading.local()  # set while a policy's call runs on this thread: nested calls are not retried


@dataclass(frozen=True)
class OutagePolicy:
    """How long a run waits for an unreachable store (module docstring).

    ``window_seconds``: from the first attempt, how long to keep starting new ones (0: a single attempt);
    the attempt under way when it ends may take longer (the store client's own timeouts and retries).
    ``first_wait_seconds`` and ``longest_wait_seconds``: the exponential wait between attempts."""

    window_seconds: float = DEFAULT_OUTAGE_SECONDS
    first_wait_seconds: float = 1.0
    longest_wait_seconds: float = 30.0

    def __post_init__(self) -> None:
        if not self.window_seconds >= 0:
            raise ValueError(
                f"the outage window must be a number of seconds >= 0, got {self.window_seconds!r}"
            )
        if not 0 < self.first_wait_seconds <= self.longest_wait_seconds:
            raise ValueError("the waits between attempts must satisfy 0 < first <= longest")

    def call(self, operation: Callable[[], Result], *, store: str, what: str) -> Result:
        """``operation()``, retried while ``store`` is unreachable; ``StoreUnavailableError`` past the window.
        ``store`` names the location ("the privacy ledger s3://…"), ``what`` the operation ("commit run
        'nightly'"): both go into the error."""
        if getattr(_inside, "active", False):
            return operation()
        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(is_unreachable),
            stop=tenacity.stop_after_delay(self.window_seconds),
            wait=tenacity.wait_exponential_jitter(
                multiplier=self.first_wait_seconds,
                max=self.longest_wait_seconds,
                jitter=self.first_wait_seconds,
            ),
            reraise=True,
        )
        _inside.active = True
        try:
            return retrying(operation)
        except Exception as error:
            if is_unreachable(error):
                raise StoreUnavailableError(
                    f"{store} was unreachable for {self.window_seconds:g} s while trying to {what} "
                    f"({type(error).__name__}: {_first_line(error)}); nothing was half written. Bring the store "
                    "back (or raise [storage] outage_seconds) and run the same command again: a run resumes "
                    "from its checkpoint with its reservation, charged once"
                ) from None
            raise
        finally:
            _inside.active = False


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:200] if text else ""


def rides_out(what: str) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Decorate a method of an object with ``outage`` (an ``OutagePolicy``) and ``store_name`` (its
    location, as an error names it): the method is retried through ``outage.call``."""

    def decorate(method: Callable[..., Result]) -> Callable[..., Result]:
        @functools.wraps(method)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Result:
            subject = f"{what} {args[0]!r}" if args and isinstance(args[0], str) else what
            return self.outage.call(
                lambda: method(self, *args, **kwargs), store=self.store_name, what=subject
            )

        return wrapped

    return decorate
