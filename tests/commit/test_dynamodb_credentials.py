"""DynamoDB commits find credentials and region the way the S3 side does (profile, AWS_PROFILE,
shared files, credential_process, environment), against moto.

moto does not check DynamoDB signatures, so a recording proxy in front of it reads each
request's ``Authorization`` header: the access key and the region of the credential scope
show which credentials and region reached DynamoDB. Config files live in a temporary HOME
(the ``aws_home`` fixture of the S3 credential tests).
"""

from __future__ import annotations

import re
import sys
import uuid
from pathlib import Path

import boto3
import pyarrow as pa
import pytest

import alance
from alance.commit import aws
from alance.errors import InvalidInputError, PermissionDeniedError
from tests.dynamodb_rig import LANCE_ATTRS, LANCE_KEYS, FaultProxy, create_table
from tests.io.test_aws_credentials import aws_home
from tests.s3_servers import S3Target

__all__ = ["aws_home"]  # the fixture, imported for pytest

TABLE = pa.table({"id": [1, 2, 3]})
SCOPE = re.compile(rb"Credential=([^/]+)/\d+/([^/]+)/dynamodb/")


class Recorder:
    """(access key, region) of every DynamoDB request that passes the proxy."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, first: bytes) -> None:
        found = SCOPE.search(first)
        if found:
            self.seen.append((found[1].decode(), found[2].decode()))


def _options(target: S3Target, ddb_endpoint: str, **extra: str) -> dict[str, str]:
    """S3 endpoint and DynamoDB endpoint only: credentials and region come from elsewhere."""
    return {"aws_endpoint": target.endpoint, "allow_http": "true",
            "dynamodb_endpoint": ddb_endpoint, **extra}


def _table_in(endpoint: str, region: str) -> str:
    """A Lance-layout DynamoDB table in ``region`` (moto keeps regions apart)."""
    name = f"commits-{uuid.uuid4().hex[:12]}"
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name=region,
                          aws_access_key_id="setup", aws_secret_access_key="setup")
    client.create_table(TableName=name, KeySchema=list(LANCE_KEYS),
                        AttributeDefinitions=list(LANCE_ATTRS), BillingMode="PAY_PER_REQUEST")
    client.get_waiter("table_exists").wait(TableName=name,
                                           WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    return name


def _ddb_uri(target: S3Target, table: str) -> str:
    return f"s3+ddb://{target.uri('ds').removeprefix('s3://')}?ddbTableName={table}"


async def _commit_twice(uri: str, options: dict[str, str]) -> None:
    ds = await alance.write_dataset(TABLE, uri, storage_options=options)
    ds = await alance.write_dataset(TABLE, uri, mode="append", storage_options=options)
    assert ds.version == 2
    again = await alance.open_dataset(uri, storage_options=options)
    assert await again.count_rows() == 6


def _write_profile(home: Path, name: str, key: str, region: str | None = None) -> None:
    section = "default" if name == "default" else name
    (home / ".aws" / "credentials").write_text(
        f"[{section}]\naws_access_key_id = {key}\naws_secret_access_key = s-{key}\n")
    if region:
        conf = "default" if name == "default" else f"profile {name}"
        (home / ".aws" / "config").write_text(f"[{conf}]\nregion = {region}\n")


async def test_profile_option_gives_keys_and_region(aws_home: Path, moto_target: S3Target
                                                    ) -> None:
    profile = f"p{uuid.uuid4().hex[:8]}"
    _write_profile(aws_home, profile, "AKIDFROMPROFILE", region="eu-west-1")
    table = _table_in(moto_target.endpoint, "eu-west-1")  # found only in the profile's region
    seen = Recorder()
    with FaultProxy(moto_target.endpoint, seen) as proxy:
        await _commit_twice(_ddb_uri(moto_target, table),
                            _options(moto_target, proxy.endpoint, profile=profile))
    assert seen.seen and set(seen.seen) == {("AKIDFROMPROFILE", "eu-west-1")}


async def test_aws_profile_variable(aws_home: Path, moto_target: S3Target,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    profile = f"p{uuid.uuid4().hex[:8]}"
    _write_profile(aws_home, profile, "AKIDFROMENVPROFILE")
    table = create_table(moto_target.endpoint)  # boto3's own session: before AWS_PROFILE
    monkeypatch.setenv("AWS_PROFILE", profile)
    seen = Recorder()
    with FaultProxy(moto_target.endpoint, seen) as proxy:
        await _commit_twice(_ddb_uri(moto_target, table), _options(moto_target, proxy.endpoint))
    assert seen.seen and {k for k, _ in seen.seen} == {"AKIDFROMENVPROFILE"}


async def test_named_profile_beats_environment_keys(aws_home: Path, moto_target: S3Target,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    profile = f"p{uuid.uuid4().hex[:8]}"
    _write_profile(aws_home, profile, "AKIDNAMED")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s-env")
    table = create_table(moto_target.endpoint)
    seen = Recorder()
    with FaultProxy(moto_target.endpoint, seen) as proxy:
        uri = _ddb_uri(moto_target, table)
        await _commit_twice(uri, _options(moto_target, proxy.endpoint, profile=profile))
        assert {k for k, _ in seen.seen} == {"AKIDNAMED"}
        seen.seen.clear()  # without the option, the environment's keys come first (as boto3)
        ds = await alance.open_dataset(uri, storage_options=_options(moto_target,
                                                                     proxy.endpoint))
        await alance.write_dataset(TABLE, ds, mode="append")
    assert seen.seen and {k for k, _ in seen.seen} == {"AKIDENV"}


async def test_credential_process_profile(aws_home: Path, moto_target: S3Target) -> None:
    profile = f"p{uuid.uuid4().hex[:8]}"
    script = aws_home / "creds.py"
    script.write_text("import json\nprint(json.dumps({'Version': 1, 'AccessKeyId': "
                      "'AKIDPROCESS', 'SecretAccessKey': 's', 'SessionToken': 't'}))\n")
    (aws_home / ".aws" / "config").write_text(
        f"[profile {profile}]\ncredential_process = {sys.executable} {script}\n")
    table = create_table(moto_target.endpoint)
    seen = Recorder()
    with FaultProxy(moto_target.endpoint, seen) as proxy:
        await _commit_twice(_ddb_uri(moto_target, table),
                            _options(moto_target, proxy.endpoint, profile=profile))
    assert seen.seen and {k for k, _ in seen.seen} == {"AKIDPROCESS"}


def test_settings_resolution(aws_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write_profile(aws_home, "default", "AKIDDEFAULT", region="ap-south-1")
    settings = aws.AwsSettings.from_storage_options({})
    assert (settings.access_key_id, settings.region) == ("AKIDDEFAULT", "ap-south-1")
    assert "AKIDDEFAULT" not in repr(settings) and "s-AKIDDEFAULT" not in repr(settings)
    monkeypatch.setenv("AWS_REGION", "sa-east-1")  # the environment's region comes first
    assert aws.AwsSettings.from_storage_options({}).region == "sa-east-1"
    explicit = aws.AwsSettings.from_storage_options(
        {"aws_access_key_id": "a", "aws_secret_access_key": "b", "region": "us-west-2"})
    assert (explicit.access_key_id, explicit.region) == ("a", "us-west-2")
    with pytest.raises(InvalidInputError, match="nowhere"):
        aws.AwsSettings.from_storage_options({"profile": "nowhere"})


async def test_no_credentials_names_the_table(aws_home: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings = aws.AwsSettings.from_storage_options({}, target="DynamoDB table t1")
    with pytest.raises(PermissionDeniedError,
                       match=r"no credentials found for DynamoDB table t1; tried: .*environment"):
        await aws.client("dynamodb", settings)


def test_pickled_settings_resolve_again(aws_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    _write_profile(aws_home, "default", "AKIDDRIVER", region="eu-west-1")
    settings = aws.AwsSettings.from_storage_options({"dynamodb_endpoint": "http://x"},
                                                    "http://x", target="DynamoDB table t")
    assert settings.access_key_id == "AKIDDRIVER"
    blob = pickle.dumps(settings)
    assert b"AKIDDRIVER" not in blob  # the driver's profile keys stay on the driver
    _write_profile(aws_home, "default", "AKIDWORKER", region="eu-west-2")
    again = pickle.loads(blob)
    assert (again.access_key_id, again.region, again.endpoint, again.target) == (
        "AKIDWORKER", "eu-west-2", "http://x", "DynamoDB table t")
    explicit = aws.AwsSettings(access_key_id="a", secret_access_key="b", region="r")
    assert pickle.loads(pickle.dumps(explicit)) == explicit
