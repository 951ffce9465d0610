"""aiobotocore clients for alance's AWS-backed commit stores, and their error mapping.

Clients are shared: one per (service, endpoint, region, credentials) *per event loop*, because
an aiobotocore client owns an aiohttp session bound to the loop that made it. They are closed
when that loop shuts down its async generators (``asyncio.run`` and ``asyncio.Runner`` do),
when :func:`close_clients` is awaited, or at interpreter exit for alance's background loop.

Settings come from pylance-style storage options (``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``aws_region``, with or without the ``aws_``
prefix); what is not given falls back to botocore's usual chain (environment, config files,
instance metadata).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from alance.errors import (
    AlanceError,
    InvalidInputError,
    NotFoundError,
    PermissionDeniedError,
    StoreError,
    TransientStoreError,
    UnsupportedFeatureError,
)

#: botocore's own attempts per call (standard mode: throttling, 5xx and connection errors).
SDK_MAX_ATTEMPTS = 4
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 20.0
MAX_POOL_CONNECTIONS = 64
DEFAULT_REGION = "us-east-1"

_ALIASES = {
    "access_key_id": ("aws_access_key_id", "access_key_id", "access_key"),
    "secret_access_key": ("aws_secret_access_key", "secret_access_key", "secret_key"),
    "session_token": ("aws_session_token", "session_token", "aws_token", "token"),
    "region": ("aws_region", "region", "aws_default_region", "default_region"),
}


@dataclass(frozen=True)
class AwsSettings:
    """Where and as whom to call an AWS service (``None``: botocore's default chain)."""

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None

    def __repr__(self) -> str:  # never show secrets
        return f"AwsSettings(endpoint={self.endpoint!r}, region={self.region!r})"

    @classmethod
    def from_storage_options(cls, options: Mapping[str, Any] | None,
                             endpoint: str | None = None) -> AwsSettings:
        """Settings from pylance-style storage options (keys are case-insensitive)."""
        lowered = {str(k).lower(): v for k, v in (options or {}).items()}
        found: dict[str, str | None] = {}
        for name, keys in _ALIASES.items():
            found[name] = next((str(lowered[k]) for k in keys if lowered.get(k)), None)
        if bool(found["access_key_id"]) != bool(found["secret_access_key"]):
            raise InvalidInputError("give both aws_access_key_id and aws_secret_access_key, "
                                    "or neither")
        region = (found["region"] or os.environ.get("AWS_REGION")
                  or os.environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION)
        return cls(endpoint or None, region, found["access_key_id"],
                   found["secret_access_key"], found["session_token"])


# -- client registry -----------------------------------------------------------------------------
_session_lock = threading.Lock()
_session: Any = None
_warmed: set[str] = set()


#: What to install for DynamoDB commits (aiobotocore is not a core dependency).
EXTRA = "alance[dynamodb]"


def require_sdk() -> None:
    """Refuse, naming the extra to install, when aiobotocore is missing."""
    import importlib.util

    try:
        found = importlib.util.find_spec("aiobotocore") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise UnsupportedFeatureError(
            "DynamoDB commits (s3+ddb:// URIs) need aiobotocore, which is not installed: "
            f"pip install '{EXTRA}'")


def _aio_session() -> Any:
    global _session
    with _session_lock:
        if _session is None:
            require_sdk()
            from aiobotocore.session import get_session

            _session = get_session()
        return _session


def _warm_up(service: str) -> None:
    session = _aio_session()
    session.warm_up_loader_caches(service)
    with contextlib.suppress(Exception):  # a broken profile surfaces when the client is made
        session.get_scoped_config()


class _LoopClients:
    """The clients of one event loop, and the hook that closes them when the loop ends."""

    def __init__(self) -> None:
        self.clients: dict[tuple[Any, ...], Any] = {}
        self.lock = asyncio.Lock()
        self.closer: AsyncIterator[None] | None = None

    async def close(self) -> None:
        clients, self.clients = list(self.clients.values()), {}
        for client in clients:
            with contextlib.suppress(Exception):  # closing is best effort
                await client.close()


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = (
    weakref.WeakKeyDictionary())
_loops_lock = threading.Lock()


async def _close_on_shutdown(holder: _LoopClients) -> AsyncIterator[None]:
    # Parked at its first yield; the loop's shutdown_asyncgens() closes it, which runs the
    # ``finally`` while the loop still runs, so the clients close their sessions properly.
    try:
        yield
    finally:
        await holder.close()


def _loop_clients() -> _LoopClients:
    loop = asyncio.get_running_loop()
    with _loops_lock:
        holder = _loops.get(loop)
        if holder is None:
            holder = _loops[loop] = _LoopClients()
    return holder


async def client(service: str, settings: AwsSettings) -> Any:
    """The shared aiobotocore client for ``service`` with ``settings`` on the running loop."""
    holder = _loop_clients()
    key = (service, settings.endpoint, settings.region, settings.access_key_id,
           settings.secret_access_key, settings.session_token)
    found = holder.clients.get(key)
    if found is not None:
        return found
    async with holder.lock:
        found = holder.clients.get(key)
        if found is not None:
            return found
        require_sdk()
        if service not in _warmed:
            # Importing aiobotocore/botocore and loading botocore's JSON models and
            # ~/.aws/config read many files: do that off the event loop, once per process.
            await asyncio.to_thread(_warm_up, service)
            _warmed.add(service)
        session = _aio_session()
        from aiobotocore.config import AioConfig

        config = AioConfig(retries={"mode": "standard", "max_attempts": SDK_MAX_ATTEMPTS},
                           connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                           max_pool_connections=MAX_POOL_CONNECTIONS)
        try:
            made = await session.create_client(
                service, region_name=settings.region, endpoint_url=settings.endpoint,
                aws_access_key_id=settings.access_key_id,
                aws_secret_access_key=settings.secret_access_key,
                aws_session_token=settings.session_token, config=config).__aenter__()
        except Exception as exc:
            raise map_error(exc, f"creating a {service} client") from exc
        holder.clients[key] = made
        if holder.closer is None:
            holder.closer = _close_on_shutdown(holder)
            await anext(holder.closer)
        return made


async def close_clients() -> None:
    """Close every client alance opened on the running event loop."""
    with _loops_lock:
        holder = _loops.get(asyncio.get_running_loop())
    if holder is not None:
        await holder.close()


def _close_at_exit() -> None:
    # A loop still running in another thread (alance.sync's background loop) closes its
    # clients there; a stopped but open loop is driven once more from here to close them.
    with _loops_lock:
        pending = list(_loops.items())
    for loop, holder in pending:
        if not holder.clients or loop.is_closed():
            continue
        with contextlib.suppress(Exception):  # exiting anyway
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(holder.close(), loop).result(timeout=2)
            else:
                loop.run_until_complete(asyncio.wait_for(holder.close(), 2))


def _forget_after_fork() -> None:
    # The parent's sessions and sockets are not ours to use or close in a forked child.
    global _session, _loops_lock, _session_lock
    _loops.clear()
    _loops_lock = threading.Lock()
    _session_lock = threading.Lock()
    _session = None


atexit.register(_close_at_exit)
os.register_at_fork(after_in_child=_forget_after_fork)


# -- errors --------------------------------------------------------------------------------------
_TRANSIENT_CODES = {
    "ThrottlingException", "Throttling", "ProvisionedThroughputExceededException",
    "RequestLimitExceeded", "InternalServerError", "InternalFailure", "ServiceUnavailable",
    "ServiceUnavailableException", "TransactionInProgressException", "LimitExceededException",
    "RequestTimeout", "RequestTimeoutException", "SlowDown",
}
_PERMISSION_CODES = {
    "AccessDeniedException", "AccessDenied", "UnrecognizedClientException",
    "InvalidSignatureException", "MissingAuthenticationTokenException",
    "ExpiredTokenException", "InvalidClientTokenId", "SignatureDoesNotMatch",
}


def error_code(exc: BaseException) -> str:
    """The AWS error code of a botocore ``ClientError`` (empty for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", ""))
    return ""


def map_error(exc: BaseException, what: str) -> AlanceError:
    """The alance error for a botocore/aiohttp failure while doing ``what``."""
    if isinstance(exc, AlanceError):
        return exc
    from botocore import exceptions as bx

    detail = f"{what}: {type(exc).__name__}: {exc}"
    code = error_code(exc)
    if isinstance(exc, bx.ClientError):
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _PERMISSION_CODES or status in (401, 403):
            return PermissionDeniedError(detail)
        if code == "ResourceNotFoundException":
            return NotFoundError(detail)
        if code in _TRANSIENT_CODES or status >= 500 or status == 429:
            return TransientStoreError(detail)
        if code == "ValidationException":
            return InvalidInputError(detail)
        return StoreError(detail)
    if isinstance(exc, (bx.NoCredentialsError, bx.PartialCredentialsError)):
        return PermissionDeniedError(detail)
    if isinstance(exc, (bx.HTTPClientError, bx.ConnectionError, asyncio.TimeoutError,
                        ConnectionError, OSError)):
        return TransientStoreError(detail)
    import aiohttp

    if isinstance(exc, aiohttp.ClientError):
        return TransientStoreError(detail)
    return StoreError(detail)
