"""Where S3 credentials, region and endpoint come from: the AWS SDKs' resolution order.

alance resolves what the AWS SDKs (botocore, the AWS CLI) would use, in their order, without
needing botocore:

1. storage options (``aws_access_key_id`` / ``aws_secret_access_key`` / ``aws_session_token``);
2. the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``);
3. web identity (``AWS_WEB_IDENTITY_TOKEN_FILE`` + ``AWS_ROLE_ARN``, or a profile's
   ``web_identity_token_file`` + ``role_arn``): handed to obstore, which exchanges the token at
   STS (``AssumeRoleWithWebIdentity``; needs the network, ``sts_endpoint`` to point elsewhere);
4. the profile (storage option ``profile``, else ``AWS_PROFILE``, else ``default``) in the
   shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, default ``~/.aws/credentials``),
   then in the config file (``AWS_CONFIG_FILE``, default ``~/.aws/config``): static keys, or
   ``credential_process`` (run when credentials are first needed and again when they expire);
5. container credentials (``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`` / ``..._FULL_URI``):
   handed to obstore;
6. instance metadata (IMDSv2, then v1) last, at ``metadata_endpoint`` /
   ``AWS_EC2_METADATA_SERVICE_ENDPOINT`` (default ``http://169.254.169.254``), with a one
   second timeout; ``AWS_EC2_METADATA_DISABLED=true`` skips it.

When none of them gives credentials, the first request fails with
:class:`~alance.errors.PermissionDeniedError` ``"no credentials found for s3://bucket; tried:
..."`` listing every source and why it did not apply, instead of an instance-metadata error.

The profile also supplies ``region`` and ``endpoint_url`` (plain, or in an ``s3 =`` block of
the profile or of its ``services`` section) when neither storage options nor the environment
(``AWS_REGION`` / ``AWS_DEFAULT_REGION``, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``) set
them. Profiles that need STS ``AssumeRole`` (``role_arn`` with ``source_profile`` or
``credential_source``) or AWS SSO (``sso_*``) are refused with
:class:`~alance.errors.UnsupportedFeatureError`; use ``credential_process`` (e.g. ``aws
configure export-credentials --profile NAME --format process``) for those.
"""

from __future__ import annotations

import configparser
import datetime as dt
import json
import os
import shlex
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alance.errors import InvalidInputError, PermissionDeniedError, UnsupportedFeatureError

#: How long ``credential_process`` may run.
CREDENTIAL_PROCESS_TIMEOUT = 60.0
#: Instance metadata: per-request timeout in seconds (botocore's default is 1 s).
IMDS_TIMEOUT = 1.0
DEFAULT_IMDS_ENDPOINT = "http://169.254.169.254"
#: Credentials are fetched again this long before they expire.
REFRESH_MARGIN = dt.timedelta(minutes=5)

_ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


@dataclass
class Resolved:
    """What the resolution gave for one S3 store."""

    #: obstore ``config`` entries to add (static keys, region, endpoint, web identity).
    config: dict[str, Any] = field(default_factory=dict)
    #: an obstore credential provider (``credential_process``, instance metadata), if any.
    provider: Callable[[], dict[str, Any]] | None = None
    #: where the credentials come from, e.g. ``"profile dev in /home/u/.aws/credentials"``.
    source: str = ""
    #: every source looked at, with why it did not apply.
    tried: list[str] = field(default_factory=list)


def _env(name: str) -> str | None:
    value = os.environ.get(name)
    return value if value else None


def _files() -> tuple[str, str]:
    credentials = _env("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials"
    config = _env("AWS_CONFIG_FILE") or "~/.aws/config"
    return os.path.expanduser(credentials), os.path.expanduser(config)


def _read_ini(path: str) -> configparser.RawConfigParser | None:
    if not os.path.isfile(path):
        return None
    parser = configparser.RawConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error as exc:
        raise InvalidInputError(f"cannot parse the AWS file {path}: {exc}") from exc
    return parser


def _nested(text: str) -> dict[str, str]:
    """The ``key = value`` lines of a nested block (``s3 =`` followed by indented lines)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            out[key.strip().lower()] = value.strip()
    return out


def profile_sections(profile: str) -> tuple[dict[str, str], dict[str, str], str, str]:
    """The profile's entries in the credentials file and in the config file, and the paths."""
    cred_path, conf_path = _files()
    creds: dict[str, str] = {}
    conf: dict[str, str] = {}
    parser = _read_ini(cred_path)
    if parser is not None and parser.has_section(profile):
        creds = {k.lower(): v for k, v in parser.items(profile)}
    parser = _read_ini(conf_path)
    if parser is not None:
        name = profile if profile == "default" else f"profile {profile}"
        for candidate in (name, profile):
            if parser.has_section(candidate):
                conf = {k.lower(): v for k, v in parser.items(candidate)}
                break
        services = conf.get("services")
        if services and parser.has_section(f"services {services}"):
            s3 = _nested(parser.get(f"services {services}", "s3", fallback=""))
            if "endpoint_url" in s3:
                conf.setdefault("__s3_endpoint_url", s3["endpoint_url"])
        if "s3" in conf:
            s3 = _nested(conf["s3"])
            if "endpoint_url" in s3:
                conf["__s3_endpoint_url"] = s3["endpoint_url"]
    return creds, conf, cred_path, conf_path


def resolve(bucket: str, config: Mapping[str, Any], profile: str | None,
            metadata_endpoint: str | None = None, *, target: str | None = None) -> Resolved:
    """Resolve credentials, region and endpoint for ``s3://bucket``.

    ``config`` is the obstore config from storage options (plain key names); ``profile`` the
    ``profile`` storage option. Returns what to add to the config, or a provider. ``target``
    names what the credentials are for in error messages (default ``s3://bucket``; the
    DynamoDB commit store resolves its credentials here too).
    """
    out = Resolved()
    what = target or f"s3://{bucket}"
    explicit_profile = profile is not None
    profile = profile or _env("AWS_PROFILE") or _env("AWS_DEFAULT_PROFILE") or "default"
    creds, conf, cred_path, conf_path = profile_sections(profile)
    if (explicit_profile or profile != "default") and not creds and not conf:
        raise InvalidInputError(f"the AWS profile {profile!r} is in neither {cred_path} "
                                f"nor {conf_path}")
    # Region and endpoint from the profile, when nothing more specific sets them.
    if "region" not in config and "default_region" not in config and not (
            _env("AWS_REGION") or _env("AWS_DEFAULT_REGION")):
        region = conf.get("region") or creds.get("region")
        if region:
            out.config["region"] = region
    if "endpoint" not in config and not (_env("AWS_ENDPOINT") or _env("AWS_ENDPOINT_URL_S3")
                                         or _env("AWS_ENDPOINT_URL")):
        endpoint = conf.get("__s3_endpoint_url") or conf.get("endpoint_url")
        if endpoint and not _truthy_env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"):
            out.config["endpoint"] = endpoint

    if config.get("skip_signature") and str(config["skip_signature"]).lower() in (
            "1", "true", "yes", "on"):
        out.source = "none (skip_signature)"
        return out
    if config.get("access_key_id") or config.get("secret_access_key"):
        out.source = "storage options"
        return out
    out.tried.append("storage options (no aws_access_key_id)")
    # With an explicitly named profile, the profile wins over the environment (as
    # ``boto3.Session(profile_name=...)``); otherwise the environment comes first.
    if not explicit_profile:
        if all(_env(k) for k in _ENV_KEYS):
            out.source = "environment (AWS_ACCESS_KEY_ID)"
            return out
        out.tried.append("environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY not set)")
        token_file, role = _env("AWS_WEB_IDENTITY_TOKEN_FILE"), _env("AWS_ROLE_ARN")
        if token_file and role:
            out.source = "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)"
            return out  # obstore reads these variables and calls STS
        out.tried.append("web identity (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN not set)")
    where = f"profile {profile!r}"
    merged = {**creds, **conf}
    if merged.get("web_identity_token_file") and merged.get("role_arn"):
        out.config["web_identity_token_file"] = os.path.expanduser(
            merged["web_identity_token_file"])
        out.config["role_arn"] = merged["role_arn"]
        if merged.get("role_session_name"):
            out.config["role_session_name"] = merged["role_session_name"]
        out.source = f"web identity of {where}"
        return out  # obstore calls STS AssumeRoleWithWebIdentity
    if merged.get("role_arn"):
        raise UnsupportedFeatureError(
            f"the AWS {where} assumes a role (role_arn with source_profile or "
            "credential_source), which needs STS AssumeRole; alance does not call it: give the "
            "profile a credential_process, e.g. 'aws configure export-credentials --profile "
            f"{profile} --format process'")
    if any(k.startswith("sso_") for k in merged):
        raise UnsupportedFeatureError(
            f"the AWS {where} uses AWS SSO, which alance does not implement: give it a "
            "credential_process ('aws configure export-credentials --profile "
            f"{profile} --format process') or export the credentials to the environment")
    if creds.get("aws_access_key_id") and creds.get("aws_secret_access_key"):
        _static(out, creds)
        out.source = f"{where} in {cred_path}"
        return out
    out.tried.append(f"{where} in the shared credentials file {cred_path} "
                     f"({'no keys' if creds else 'absent'})")
    if merged.get("credential_process"):
        out.provider = CredentialProcess(merged["credential_process"], where)
        out.source = f"credential_process of {where}"
        return out
    if conf.get("aws_access_key_id") and conf.get("aws_secret_access_key"):
        _static(out, conf)
        out.source = f"{where} in {conf_path}"
        return out
    out.tried.append(f"{where} in the config file {conf_path} "
                     f"({'no keys or credential_process' if conf else 'absent'})")
    if explicit_profile:
        raise PermissionDeniedError(f"no credentials found for {what}: the AWS "
                                    f"{where} has none; tried: " + "; ".join(out.tried))
    if (_env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
            or _env("AWS_CONTAINER_CREDENTIALS_FULL_URI")
            or config.get("container_credentials_relative_uri")
            or config.get("container_credentials_full_uri")):
        out.source = "container credentials"
        return out  # obstore reads them
    out.tried.append("container credentials (AWS_CONTAINER_CREDENTIALS_* not set)")
    if _truthy_env("AWS_EC2_METADATA_DISABLED"):
        out.tried.append("instance metadata (AWS_EC2_METADATA_DISABLED)")
        out.provider = NoCredentials(bucket, out.tried, what)
        return out
    endpoint = (metadata_endpoint or _env("AWS_EC2_METADATA_SERVICE_ENDPOINT")
                or DEFAULT_IMDS_ENDPOINT)
    out.provider = InstanceMetadata(endpoint, bucket, out.tried, what)
    out.source = f"instance metadata at {endpoint}"
    return out


def _static(out: Resolved, section: Mapping[str, str]) -> None:
    out.config["access_key_id"] = section["aws_access_key_id"]
    out.config["secret_access_key"] = section["aws_secret_access_key"]
    if section.get("aws_session_token"):
        out.config["session_token"] = section["aws_session_token"]


def _truthy_env(name: str) -> bool:
    return (_env(name) or "").strip().lower() in ("1", "true", "yes", "on")


def _expiry(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


class _Cached:
    """An obstore credential provider that fetches once and again shortly before expiry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        with self._lock:
            cached = self._cached
            now = dt.datetime.now(dt.UTC)
            if cached is not None and (cached["expires_at"] is None
                                       or cached["expires_at"] - REFRESH_MARGIN > now):
                return cached
            self._cached = self.fetch()
            return self._cached

    def fetch(self) -> dict[str, Any]:  # pragma: no cover - overridden
        raise NotImplementedError


class CredentialProcess(_Cached):
    """Credentials printed by a profile's ``credential_process`` (the AWS CLI's JSON form:
    ``{"Version": 1, "AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}``)."""

    def __init__(self, command: str, where: str) -> None:
        super().__init__()
        self.command = command
        self.where = where

    def __repr__(self) -> str:
        return f"CredentialProcess({self.where})"

    def fetch(self) -> dict[str, Any]:
        try:
            done = subprocess.run(shlex.split(self.command), capture_output=True, text=True,
                                  timeout=CREDENTIAL_PROCESS_TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
            raise PermissionDeniedError(f"the credential_process of {self.where} failed to "
                                        f"run: {exc}") from exc
        if done.returncode != 0:
            raise PermissionDeniedError(
                f"the credential_process of {self.where} exited with {done.returncode}: "
                f"{done.stderr.strip()[:500]}")
        try:
            data = json.loads(done.stdout)
            if data.get("Version", 1) != 1:
                raise ValueError(f"unsupported Version {data.get('Version')!r}")
            return {"access_key_id": data["AccessKeyId"],
                    "secret_access_key": data["SecretAccessKey"],
                    "token": data.get("SessionToken"),
                    "expires_at": _expiry(data.get("Expiration"))}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise PermissionDeniedError(f"the credential_process of {self.where} printed no "
                                        f"valid credentials: {exc}") from exc


class NoCredentials:
    """A provider that always fails with the list of sources tried."""

    def __init__(self, bucket: str, tried: list[str], target: str | None = None) -> None:
        self.bucket = bucket
        self.tried = tried
        self.target = target

    def __call__(self) -> dict[str, Any]:
        raise no_credentials(self.bucket, self.tried, self.target)


def no_credentials(bucket: str, tried: list[str] | tuple[str, ...],
                   target: str | None = None) -> PermissionDeniedError:
    """The error for an S3 store (or ``target``) no credential source could serve."""
    return PermissionDeniedError(f"no credentials found for {target or 's3://' + bucket}; "
                                 "tried: " + "; ".join(tried))


class InstanceMetadata(_Cached):
    """Role credentials from the EC2 instance metadata service (IMDSv2 token, else v1)."""

    def __init__(self, endpoint: str, bucket: str, tried: list[str],
                 target: str | None = None) -> None:
        super().__init__()
        self.endpoint = endpoint.rstrip("/")
        self.bucket = bucket
        self.tried = tried
        self.target = target

    def __repr__(self) -> str:
        return f"InstanceMetadata({self.endpoint!r})"

    def _request(self, method: str, path: str, headers: dict[str, str]) -> str:
        request = urllib.request.Request(self.endpoint + path, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=IMDS_TIMEOUT) as response:
            return str(response.read().decode())

    def fetch(self) -> dict[str, Any]:
        try:
            headers: dict[str, str] = {}
            try:
                token = self._request("PUT", "/latest/api/token",
                                      {"X-aws-ec2-metadata-token-ttl-seconds": "21600"})
                headers = {"X-aws-ec2-metadata-token": token}
            except urllib.error.HTTPError as exc:
                if exc.code not in (403, 404, 405):  # v1-only services answer these
                    raise
            base = "/latest/meta-data/iam/security-credentials/"
            role = self._request("GET", base, headers).strip().splitlines()[0]
            data = json.loads(self._request("GET", base + role, headers))
            return {"access_key_id": data["AccessKeyId"],
                    "secret_access_key": data["SecretAccessKey"],
                    "token": data.get("Token"),
                    "expires_at": _expiry(data.get("Expiration"))}
        except (OSError, ValueError, KeyError, IndexError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise no_credentials(self.bucket, [
                *self.tried, f"instance metadata at {self.endpoint} ({reason})"],
                self.target) from exc
