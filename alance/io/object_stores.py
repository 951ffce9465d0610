"""Building obstore stores for cloud URIs from pylance-style ``storage_options``.

pylance (and the Rust ``object_store`` crate under it) accept option names with or without a
provider prefix (``aws_endpoint`` or ``endpoint``), and mix store settings with HTTP client
settings (``allow_http``). This module sorts them into obstore's ``config`` and
``client_options`` and refuses names it does not know, so a typo never passes silently.
S3 credentials, region and endpoint are resolved as the AWS SDKs do (storage options, the
environment, web identity, the ``profile`` option / ``AWS_PROFILE`` in the shared config files
with ``credential_process``, container credentials, instance metadata): see
:mod:`alance.io.aws_credentials`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from obstore.exceptions import BaseError as ObstoreError
from obstore.store import AzureStore, GCSStore, S3Store

from alance.errors import InvalidInputError
from alance.io import aws_credentials

#: HTTP client settings (obstore ``client_options``), by their plain names.
_CLIENT_KEYS = {
    "allow_http", "allow_invalid_certificates", "connect_timeout", "timeout",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate",
    "proxy_excludes", "user_agent", "http1_only", "http2_only", "http2_keep_alive_interval",
    "http2_keep_alive_timeout", "http2_keep_alive_while_idle", "default_content_type",
    "randomize_addresses",
}
_BOOL_CLIENT_KEYS = {"allow_http", "allow_invalid_certificates", "http1_only", "http2_only",
                     "http2_keep_alive_while_idle", "randomize_addresses"}

#: Store settings per provider (obstore ``config``), by their plain names, plus aliases.
_S3_KEYS = {
    "access_key_id", "secret_access_key", "session_token", "region", "default_region",
    "endpoint", "bucket", "checksum_algorithm", "conditional_put", "copy_if_not_exists",
    "disable_tagging", "disable_bulk_delete", "metadata_endpoint", "request_payer", "role_arn",
    "role_session_name", "server_side_encryption", "skip_signature", "sse_bucket_key_enabled",
    "sse_kms_key_id", "sts_endpoint", "unsigned_payload", "virtual_hosted_style_request",
    "imdsv1_fallback", "s3_express", "container_credentials_relative_uri",
    "container_credentials_full_uri", "container_authorization_token_file",
}
_S3_ALIASES = {"endpoint_url": "endpoint", "token": "session_token",
               "access_key": "access_key_id", "secret_key": "secret_access_key"}
_GCS_KEYS = {"service_account", "service_account_key", "application_credentials", "bucket",
             "service_account_path"}
_AZURE_KEYS = {
    "account_name", "account_key", "client_id", "client_secret", "tenant_id", "sas_key",
    "token", "use_emulator", "endpoint", "use_fabric_endpoint", "container_name",
    "authority_host", "msi_endpoint", "object_id", "msi_resource_id", "federated_token_file",
    "use_azure_cli", "skip_signature", "disable_tagging",
}
_PREFIXES = {"s3": ("aws_",), "gs": ("google_", "gcs_"), "az": ("azure_storage_", "azure_")}

#: Options alance itself understands (taken out before the rest goes to obstore).
ALANCE_KEYS = {"max_concurrency", "coalesce_bytes", "max_retries", "retry_timeout",
               "dynamodb_endpoint", "profile", "deadline", "slow_warning"}

#: One HTTP request to S3 may take this long (storage option ``timeout``), so that a retry
#: still fits in the default per-operation deadline of 60 s.
REQUEST_TIMEOUT = timedelta(seconds=30)


def _truthy(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def split_options(scheme: str, options: Mapping[str, Any],
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sort storage options into obstore ``(config, client_options)`` for a URI scheme."""
    store_keys = {"s3": _S3_KEYS, "gs": _GCS_KEYS, "az": _AZURE_KEYS}[scheme]
    config: dict[str, Any] = {}
    client: dict[str, Any] = {}
    for raw_key, value in options.items():
        key = raw_key.lower()
        for prefix in _PREFIXES[scheme]:
            if key.startswith(prefix):
                key = key[len(prefix):]
                break
        if scheme == "s3":
            key = _S3_ALIASES.get(key, key)
        if key in _CLIENT_KEYS:
            client[key] = _truthy(value) if key in _BOOL_CLIENT_KEYS else value
        elif key in store_keys:
            config[key] = value
        else:
            raise InvalidInputError(f"unknown storage option {raw_key!r} for {scheme}:// URIs")
    return config, client


def _env_endpoint() -> dict[str, str]:
    # obstore reads AWS_ENDPOINT itself; the AWS SDKs' names are AWS_ENDPOINT_URL(_S3).
    url = (os.environ.get("AWS_ENDPOINT") or os.environ.get("AWS_ENDPOINT_URL_S3")
           or os.environ.get("AWS_ENDPOINT_URL"))
    return {"endpoint": url} if url else {}


def _env_client_options() -> dict[str, Any]:
    # obstore drops the client settings it read from the environment (AWS_ALLOW_HTTP...) as
    # soon as any client option is passed explicitly, and alance always passes timeouts.
    out: dict[str, Any] = {}
    for name in ("allow_http", "allow_invalid_certificates"):
        value = os.environ.get(f"AWS_{name.upper()}")
        if value is not None:
            out[name] = _truthy(value)
    return out


def build_cloud_store(scheme: str, bucket: str, options: Mapping[str, Any],
                      retry_config: dict[str, Any]) -> Any:
    """An obstore store for ``scheme://bucket`` (scheme ``s3``, ``gs`` or ``az``).

    Options obstore cannot use (malformed credentials, bad values) raise
    :class:`InvalidInputError`.
    """
    try:
        return _build(scheme, bucket, options, retry_config)
    except (ObstoreError, ValueError, TypeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInputError(f"cannot configure {scheme}://{bucket}: {first}") from exc


def _build(scheme: str, bucket: str, options: Mapping[str, Any],
           retry_config: dict[str, Any]) -> Any:
    options = dict(options)
    profile = options.pop("profile", None) or options.pop("aws_profile", None)
    options.pop("aws_profile", None)
    if profile is not None and scheme != "s3":
        raise InvalidInputError(f"unknown storage option 'profile' for {scheme}:// URIs")
    config, client = split_options(scheme, options)
    if scheme == "s3":
        resolved = aws_credentials.resolve(bucket, config, str(profile) if profile else None,
                                           config.pop("metadata_endpoint", None))
        config = {**_env_endpoint(), **resolved.config, **config}
        client = {**_env_client_options(), **client}
        endpoint = str(config.get("endpoint", ""))
        if endpoint.startswith("http://") and "allow_http" not in client:
            client["allow_http"] = True  # an explicit http:// endpoint is the user's choice
        # S3 has no native copy-if-absent; a multipart copy with a precondition does it.
        config.setdefault("copy_if_not_exists", "multipart")
        client.setdefault("connect_timeout", timedelta(seconds=5))
        # One request may take REQUEST_TIMEOUT; the whole operation, retries included, is
        # bounded by the store's deadline (alance.io.deadline: 60 s unless set).
        client.setdefault("timeout", REQUEST_TIMEOUT)
        if resolved.provider is not None:  # credentials that refresh: a store of their own
            return S3Store(bucket, config=config,  # type: ignore[arg-type]
                           client_options=client,  # type: ignore[arg-type]
                           retry_config=retry_config,  # type: ignore[arg-type]
                           credential_provider=resolved.provider)  # type: ignore[arg-type]
    return _shared(scheme, bucket, config, client, retry_config)


#: Stores already built, by everything they were built from (see :func:`_shared`).
_STORES: dict[str, Any] = {}
#: Environment variables the stores' SDK settings may come from.
_ENV_PREFIXES = ("AWS_", "GOOGLE_", "GCS_", "AZURE_")
#: Stores kept at most (then the memory starts over).
MAX_SHARED_STORES = 64


def _forget_stores() -> None:
    _STORES.clear()


os.register_at_fork(after_in_child=_forget_stores)  # a child builds its own


def _shared(scheme: str, bucket: str, config: Mapping[str, Any], client: Mapping[str, Any],
            retry_config: Mapping[str, Any]) -> Any:
    """The store for these settings, built once per process: building one costs milliseconds
    (an HTTP client, TLS roots), and a store built anew has no open connections, so every
    dataset opened from a URI would pay a connection set-up per request it makes first.
    The environment variables obstore reads itself (credentials, web identity...) are part
    of the settings: rotated ones get a new store."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES))
    key = repr((scheme, bucket, sorted(config.items()), sorted(client.items()),
                sorted(retry_config.items()), env))
    found = _STORES.get(key)
    if found is not None:
        return found
    cls = {"s3": S3Store, "gs": GCSStore}.get(scheme, AzureStore)
    built = cls(bucket, config=config, client_options=client,  # type: ignore[arg-type]
                retry_config=retry_config)  # type: ignore[arg-type]
    if len(_STORES) >= MAX_SHARED_STORES:
        _STORES.clear()
    _STORES[key] = built
    return built
