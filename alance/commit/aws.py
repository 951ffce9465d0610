"""aiobotocore clients for alance's AWS-backed commit stores, and their error mapping.

Clients are shared: one per (service, endpoint, region, credentials) *per event loop*, because
an aiobotocore client owns an aiohttp session bound to the loop that made it. They are closed
when that loop shuts down its async generators (``asyncio.run`` and ``asyncio.Runner`` do),
when :func:`close_clients` is awaited, or at interpreter exit for alance's background loop.

Settings come from pylance-style storage options (``aws_access_key_id``,
``aws_secret_access_key``, ``aws_session_token``, ``aws_region``, ``profile``, with or without
the ``aws_`` prefix); credentials and region not given there are resolved as for ``s3://``
(:mod:`alance.io.aws_credentials`: environment, web identity, the profile's shared files,
container, instance metadata), so one profile serves both the S3 store and DynamoDB.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
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

#: botocore's own retries per call (its "max_attempts" counts retries: 5 attempts in all;
#: standard mode: throttling, 5xx and connection errors).
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
    """Where and as whom to call an AWS service.

    Built by :meth:`from_storage_options`, which resolves credentials and region exactly as the
    S3 side does (:mod:`alance.io.aws_credentials`): static keys (storage options, environment,
    the profile's files) are carried here; sources botocore implements the same way
    (``credential_process``, web identity, container, instance metadata) are left to a botocore
    session for ``profile``.
    """

    endpoint: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    #: the AWS profile a botocore session resolves credentials from when no keys are given
    #: (``None``: botocore's default chain).
    profile: str | None = None
    #: where the credentials come from, e.g. ``"profile 'dev' in /home/u/.aws/credentials"``.
    source: str = ""
    #: when set, no source gives credentials: the sources tried, for the error.
    no_credentials: tuple[str, ...] = ()
    #: what the credentials are for, in messages.
    target: str = "DynamoDB"
    #: the storage options and endpoint these settings were resolved from: a pickled copy
    #: resolves again where it is unpickled (as the S3 store does), so credentials found in
    #: the driver's environment or profile do not travel to workers.
    origin: tuple[tuple[tuple[str, str], ...], str | None] | None = field(
        default=None, repr=False, compare=False)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.origin is None:
            return (type(self), (self.endpoint, self.region, self.access_key_id,
                                 self.secret_access_key, self.session_token, self.profile,
                                 self.source, self.no_credentials, self.target))
        options, endpoint = self.origin
        return (_resolved_again, (dict(options), endpoint, self.target))

    def __repr__(self) -> str:  # never show secrets
        return (f"AwsSettings(endpoint={self.endpoint!r}, region={self.region!r}, "
                f"profile={self.profile!r}, source={self.source!r})")

    @classmethod
    def from_storage_options(cls, options: Mapping[str, Any] | None,
                             endpoint: str | None = None, *,
                             target: str = "DynamoDB") -> AwsSettings:
        """Settings from pylance-style storage options (keys are case-insensitive).

        Credentials and region are resolved as for ``s3://`` (see
        :mod:`alance.io.aws_credentials`): storage options, the environment, web identity, the
        profile (storage option ``profile``, else ``AWS_PROFILE``, else ``default``) in the
        shared files (static keys or ``credential_process``), container credentials,
        instance metadata. The region: storage options, ``AWS_REGION`` /
        ``AWS_DEFAULT_REGION``, the profile's ``region``, else ``us-east-1``.
        """
        from alance.io import aws_credentials

        lowered = {str(k).lower(): v for k, v in (options or {}).items()}
        found: dict[str, str | None] = {}
        for name, keys in _ALIASES.items():
            found[name] = next((str(lowered[k]) for k in keys if lowered.get(k)), None)
        if bool(found["access_key_id"]) != bool(found["secret_access_key"]):
            raise InvalidInputError("give both aws_access_key_id and aws_secret_access_key, "
                                    "or neither")
        explicit = lowered.get("profile") or lowered.get("aws_profile")
        config: dict[str, Any] = {}
        if found["access_key_id"]:
            config["access_key_id"] = found["access_key_id"]
            config["secret_access_key"] = found["secret_access_key"]
        if found["region"]:
            config["region"] = found["region"]
        resolved = aws_credentials.resolve("", config, str(explicit) if explicit else None,
                                           target=target)
        region = (found["region"] or os.environ.get("AWS_REGION")
                  or os.environ.get("AWS_DEFAULT_REGION") or resolved.config.get("region")
                  or DEFAULT_REGION)
        profile = (str(explicit) if explicit else None) or os.environ.get(
            "AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE") or None
        creds: tuple[str | None, str | None, str | None] = (None, None, None)
        if found["access_key_id"]:
            creds = (found["access_key_id"], found["secret_access_key"],
                    found["session_token"])
        elif resolved.source.startswith("environment"):
            creds = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                    os.environ.get("AWS_SESSION_TOKEN") or None)
        elif resolved.config.get("access_key_id"):
            creds = (resolved.config["access_key_id"], resolved.config["secret_access_key"],
                    resolved.config.get("session_token"))
        missing: tuple[str, ...] = ()
        if isinstance(resolved.provider, aws_credentials.NoCredentials):
            missing = tuple(resolved.tried)
        wanted = {k for keys in _ALIASES.values() for k in keys} | {"profile", "aws_profile"}
        origin = (tuple((k, str(v)) for k, v in lowered.items() if k in wanted and v), endpoint)
        return cls(endpoint or None, region, creds[0], creds[1], creds[2], profile=profile,
                   source=resolved.source or "none", no_credentials=missing, target=target,
                   origin=origin)


def _resolved_again(options: dict[str, str], endpoint: str | None, target: str) -> AwsSettings:
    """Unpickling: resolve the settings again in this process."""
    return AwsSettings.from_storage_options(options, endpoint, target=target)


# -- client registry -----------------------------------------------------------------------------
_session_lock = threading.Lock()
_sessions: dict[str | None, Any] = {}
_warmed: set[tuple[str, str | None]] = set()


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


def _aio_session(profile: str | None = None) -> Any:
    """The process's aiobotocore session for ``profile`` (``None``: the default chain)."""
    with _session_lock:
        session = _sessions.get(profile)
        if session is None:
            require_sdk()
            from aiobotocore.session import AioSession

            session = _sessions[profile] = AioSession(profile=profile)
        return session


def _warm_up(service: str, profile: str | None) -> None:
    session = _aio_session(profile)
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
    if settings.no_credentials:
        from alance.io.aws_credentials import no_credentials

        raise no_credentials("", settings.no_credentials, settings.target)
    # With keys in hand the profile only matters for what botocore reads besides credentials.
    profile = settings.profile
    key = (service, settings.endpoint, settings.region, settings.access_key_id,
           settings.secret_access_key, settings.session_token, profile)
    found = holder.clients.get(key)
    if found is not None:
        return found
    async with holder.lock:
        found = holder.clients.get(key)
        if found is not None:
            return found
        require_sdk()
        if (service, profile) not in _warmed:
            # Importing aiobotocore/botocore and loading botocore's JSON models and
            # ~/.aws/config read many files: do that off the event loop, once per process.
            await asyncio.to_thread(_warm_up, service, profile)
            _warmed.add((service, profile))
        session = _aio_session(profile)
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
    global _loops_lock, _session_lock
    _loops.clear()
    _loops_lock = threading.Lock()
    _session_lock = threading.Lock()
    _sessions.clear()


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
        return PermissionDeniedError(f"no credentials found: {detail}")
    if isinstance(exc, (bx.HTTPClientError, bx.ConnectionError, asyncio.TimeoutError,
                        ConnectionError, OSError)):
        return TransientStoreError(detail)
    import aiohttp

    if isinstance(exc, aiohttp.ClientError):
        return TransientStoreError(detail)
    return StoreError(detail)
