"""AWS credentials and settings from shared profiles, as the AWS SDKs read them.

obstore reads credentials from the environment (``AWS_ACCESS_KEY_ID``...), web identity and
instance metadata, but not from the shared files boto3 users keep them in. This module fills
that gap: when neither the storage options nor the environment give keys, the profile
(``profile`` / ``aws_profile`` storage option, else ``AWS_PROFILE``, else ``default``) is read
from the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, default
``~/.aws/credentials``) and the config file (``AWS_CONFIG_FILE``, default ``~/.aws/config``,
section ``[profile NAME]`` or ``[default]``): keys and session token, ``region``,
``endpoint_url``, and ``credential_process`` (run once; its JSON gives the keys). Order: options,
environment, profile files, then obstore's own chain (web identity, container, instance
metadata). The files are small and read where the store is opened; a credential process
runs there too (its answer is kept until its ``Expiration``).
"""

from __future__ import annotations

import configparser
import datetime as dt
import json
import os
import shlex
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alance.errors import InvalidInputError, PermissionDeniedError

__all__ = ["profile_settings"]

#: Storage options naming the profile (taken out before the rest goes to obstore).
PROFILE_KEYS = ("profile", "aws_profile")


def _read(path: str | None, default: str) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser()
    file = Path(os.path.expanduser(path or default))
    if file.is_file():
        try:
            parser.read(file)
        except configparser.Error as exc:
            raise InvalidInputError(f"cannot read AWS settings file {file}: {exc}") from exc
    return parser


def _section(parser: configparser.RawConfigParser, *names: str) -> dict[str, str]:
    for name in names:
        if parser.has_section(name):
            return dict(parser.items(name))
    return {}


#: ``credential_process`` answers by command, with when they stop being valid (seconds since
#: the epoch; None: never), so that opening many datasets does not run the process each time.
_PROCESS_KEYS: dict[str, tuple[dict[str, str], float | None]] = {}


def _from_process(command: str, profile: str) -> dict[str, str]:
    """Keys from a ``credential_process`` (the SDKs' JSON protocol, version 1), run once and
    again only after the ``Expiration`` it gave (minus a minute)."""
    cached = _PROCESS_KEYS.get(command)
    if cached is not None and (cached[1] is None or time.time() < cached[1]):
        return dict(cached[0])
    try:
        done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                              timeout=60, check=True)
        data = json.loads(done.stdout)
        out = {"access_key_id": data["AccessKeyId"],
               "secret_access_key": data["SecretAccessKey"]}
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError) as exc:
        raise PermissionDeniedError(f"credential_process of AWS profile {profile!r} failed: "
                                    f"{exc}") from exc
    if data.get("SessionToken"):
        out["session_token"] = data["SessionToken"]
    expires = None
    if data.get("Expiration"):
        try:
            expires = dt.datetime.fromisoformat(str(data["Expiration"]).replace(
                "Z", "+00:00")).timestamp() - 60
        except ValueError:
            expires = time.time()  # unreadable: ask again next time
    _PROCESS_KEYS[command] = (dict(out), expires)
    return out


def profile_settings(config: Mapping[str, Any], profile: str | None) -> dict[str, Any]:
    """Settings to add to an S3 store's obstore ``config`` from the shared AWS files (none
    when the options or the environment already give keys, or nothing is found)."""
    explicit = profile is not None
    if not explicit and "access_key_id" in config and "endpoint" in config and (
            "region" in config or "default_region" in config):
        return {}  # everything given: no files to read
    name = profile or os.environ.get("AWS_PROFILE") or "default"
    env_keys = os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY")
    creds = _section(_read(os.environ.get("AWS_SHARED_CREDENTIALS_FILE"), "~/.aws/credentials"),
                     name)
    settings = _section(_read(os.environ.get("AWS_CONFIG_FILE"), "~/.aws/config"),
                        f"profile {name}", name)
    if explicit and not creds and not settings:
        raise InvalidInputError(f"AWS profile {name!r} is not in the shared credentials or "
                                "config file")
    out: dict[str, Any] = {}
    region_given = ("region" in config or "default_region" in config
                    or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))
    if not region_given and settings.get("region"):
        out["region"] = settings["region"]
    if "endpoint" not in config and settings.get("endpoint_url") and not (
            os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")):
        out["endpoint"] = settings["endpoint_url"]
    if "access_key_id" in config or (env_keys and not explicit):
        return out
    merged = {**settings, **creds}
    if merged.get("aws_access_key_id") and merged.get("aws_secret_access_key"):
        out["access_key_id"] = merged["aws_access_key_id"]
        out["secret_access_key"] = merged["aws_secret_access_key"]
        if merged.get("aws_session_token"):
            out["session_token"] = merged["aws_session_token"]
    elif merged.get("credential_process"):
        out.update(_from_process(merged["credential_process"], name))
    return out
