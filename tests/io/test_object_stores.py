"""Cloud URIs and pylance-style storage options (offline: stores are built, not contacted)."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.errors import InvalidInputError, UnsupportedFeatureError
from alance.io.object_stores import split_options
from alance.io.uri import open_store


def test_s3_option_spellings() -> None:
    config, client = split_options("s3", {
        "aws_endpoint": "http://127.0.0.1:9000", "aws_access_key_id": "k",
        "AWS_SECRET_ACCESS_KEY": "s", "aws_region": "eu-west-1", "allow_http": "true",
        "endpoint_url": "http://x", "aws_session_token": "t", "timeout": "30s"})
    assert config == {"endpoint": "http://x", "access_key_id": "k", "secret_access_key": "s",
                      "region": "eu-west-1", "session_token": "t"}
    assert client == {"allow_http": True, "timeout": "30s"}
    with pytest.raises(InvalidInputError, match="aws_endpiont"):
        split_options("s3", {"aws_endpiont": "http://typo"})


@pytest.mark.parametrize(("uri", "options", "root"), [
    ("s3://bucket/a/b.lance", {"aws_region": "us-east-1", "aws_access_key_id": "k",
                               "aws_secret_access_key": "s"}, "a/b.lance"),
    ("gs://bucket/x.lance", {}, "x.lance"),
    ("az://container/dir/x.lance", {"azure_storage_account_name": "acct",
                                     "azure_storage_account_key": "a2V5"}, "dir/x.lance"),
])
def test_cloud_stores_are_built_and_pickle(uri: str, options: dict, root: str) -> None:
    store = open_store(uri, options)
    assert store.root == root
    assert store.limiter_key.split("://")[1] in ("bucket", "container")
    again = pickle.loads(pickle.dumps(store))
    assert (again.uri, again.root, again.max_concurrency) == (uri, root, store.max_concurrency)


def test_bad_cloud_uris() -> None:
    with pytest.raises(InvalidInputError):
        open_store("s3://bucket", {})
    with pytest.raises(InvalidInputError):
        open_store("s3:///path.lance", {})
    with pytest.raises(UnsupportedFeatureError):
        open_store("ftp://host/x.lance", {})
    with pytest.raises(InvalidInputError, match="gs://bucket"):
        open_store("gs://bucket/x.lance", {"google_service_account_key": "{}"})
    with pytest.raises(InvalidInputError, match="max_concurrency"):
        open_store("s3://b/x.lance", {"max_concurrency": "many"})


def _profiles(tmp_path: Path, target: Any, monkeypatch: pytest.MonkeyPatch,
              credentials: str) -> None:
    """Shared AWS files with profile ``mine`` whose endpoint is the moto server."""
    (tmp_path / "config").write_text(
        f"[profile mine]\nregion = {target.region}\nendpoint_url = {target.endpoint}\n")
    (tmp_path / "credentials").write_text(credentials)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION",
                 "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)


def test_aws_profile_from_shared_files(tmp_path: Path, moto_target: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``profile`` (or ``AWS_PROFILE``) reads keys, region and endpoint from the shared files,
    as boto3 does: the dataset is reachable with no other storage option."""
    _profiles(tmp_path, moto_target, monkeypatch,
              f"[mine]\naws_access_key_id = {moto_target.access_key_id}\n"
              f"aws_secret_access_key = {moto_target.secret_access_key}\n")
    uri = moto_target.uri("profile-ds")
    al.write_dataset(pa.table({"a": [1, 2, 3]}), uri, storage_options={"profile": "mine"})
    monkeypatch.setenv("AWS_PROFILE", "mine")
    assert al.open_dataset(uri).to_table().column("a").to_pylist() == [1, 2, 3]
    with pytest.raises(alance.InvalidInputError, match="profile 'nope'"):
        al.open_dataset(uri, storage_options={"profile": "nope"})


def test_aws_credential_process(tmp_path: Path, moto_target: Any,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A profile's ``credential_process`` is run and its keys used."""
    marker = tmp_path / "ran"
    script = tmp_path / "creds.py"
    script.write_text(
        "import json, pathlib\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        f"print(json.dumps({{'Version': 1, 'AccessKeyId': {moto_target.access_key_id!r}, "
        f"'SecretAccessKey': {moto_target.secret_access_key!r}}}))\n")
    _profiles(tmp_path, moto_target, monkeypatch,
              f"[mine]\ncredential_process = {sys.executable} {script}\n")
    uri = moto_target.uri("process-ds")
    al.write_dataset(pa.table({"a": [4]}), uri, storage_options={"profile": "mine"})
    assert marker.read_text() == "yes"
    assert al.open_dataset(uri, storage_options={"profile": "mine"}).count_rows() == 1


def test_no_credentials_found_is_said_plainly(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the options, the environment or the profile files, and no instance metadata
    service: a PermissionDeniedError saying no credentials were found (not retried)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(alance.PermissionDeniedError, match="no AWS credentials found"):
        al.open_dataset("s3://bucket/ds", storage_options={
            "aws_endpoint": "http://127.0.0.1:9", "aws_region": "us-east-1",
            "aws_metadata_endpoint": "http://127.0.0.1:9"})
