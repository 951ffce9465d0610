"""S3 credentials, region and endpoint resolved the way the AWS SDKs do.

The S3 server is SeaweedFS, which checks request signatures: a test whose credentials did not
reach the request fails with ``PermissionDeniedError``. Config files live in a temporary HOME;
the environment holds no AWS variables except those a test sets.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import alance
from alance.errors import InvalidInputError, PermissionDeniedError, UnsupportedFeatureError
from alance.io import aws_credentials
from tests.s3_servers import S3Target

TABLE = pa.table({"id": [1, 2, 3]})


@pytest.fixture
def aws_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME with ``~/.aws``, and no AWS variables in the environment."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".aws").mkdir()
    # Never reach a real instance metadata service from the tests.
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    return tmp_path


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _uri(target: S3Target, name: str = "ds") -> str:
    return target.uri(name)


def _credential_script(tmp_path: Path, key: str, secret: str) -> tuple[str, Path]:
    """A credential_process command that records each run in a marker file."""
    marker = tmp_path / "process-ran"
    script = tmp_path / "creds.py"
    script.write_text(
        "import json, pathlib\n"
        f"p = pathlib.Path({str(marker)!r}); p.write_text(p.read_text() + 'x' "
        "if p.exists() else 'x')\n"
        f"print(json.dumps({{'Version': 1, 'AccessKeyId': {key!r}, "
        f"'SecretAccessKey': {secret!r}, 'Expiration': '2999-01-01T00:00:00Z'}}))\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return f"{sys.executable} {script}", marker


async def test_profile_credential_process_region_and_endpoint(
        aws_home: Path, seaweed_target: S3Target, monkeypatch: pytest.MonkeyPatch) -> None:
    command, marker = _credential_script(aws_home, seaweed_target.access_key_id,
                                         seaweed_target.secret_access_key)
    (aws_home / ".aws" / "config").write_text(
        "[profile dev]\n"
        f"region = {seaweed_target.region}\n"
        f"endpoint_url = {seaweed_target.endpoint}\n"
        f"credential_process = {command}\n")
    monkeypatch.setenv("AWS_PROFILE", "dev")
    ds = await alance.write_dataset(TABLE, _uri(seaweed_target))  # no storage options at all
    assert (await ds.to_table()).equals(TABLE)
    assert marker.read_text() == "x"  # run once, its credentials cached until they expire


async def test_credential_process_keys_are_the_ones_used(
        aws_home: Path, seaweed_target: S3Target) -> None:
    command, marker = _credential_script(aws_home, "WRONGKEY", "wrong-secret")
    (aws_home / ".aws" / "config").write_text(
        f"[profile bad]\nregion = us-east-1\nendpoint_url = {seaweed_target.endpoint}\n"
        f"credential_process = {command}\n")
    with pytest.raises(PermissionDeniedError):
        await alance.write_dataset(TABLE, _uri(seaweed_target), storage_options={
            "profile": "bad"})
    assert marker.exists()


async def test_profile_option_wins_over_environment_keys(
        aws_home: Path, seaweed_target: S3Target, monkeypatch: pytest.MonkeyPatch) -> None:
    (aws_home / ".aws" / "credentials").write_text(
        f"[dev]\naws_access_key_id = {seaweed_target.access_key_id}\n"
        f"aws_secret_access_key = {seaweed_target.secret_access_key}\n")
    (aws_home / ".aws" / "config").write_text(
        f"[profile dev]\nregion = us-east-1\nendpoint_url = {seaweed_target.endpoint}\n")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "WRONGKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")
    ds = await alance.write_dataset(TABLE, _uri(seaweed_target),
                                    storage_options={"profile": "dev"})
    assert await ds.count_rows() == 3
    # AWS_PROFILE, unlike an explicit profile, comes after the environment's keys (as in
    # botocore): the wrong keys are used and refused.
    monkeypatch.setenv("AWS_PROFILE", "dev")
    with pytest.raises(PermissionDeniedError):
        await alance.open_dataset(_uri(seaweed_target))


async def test_custom_config_file_locations(
        aws_home: Path, seaweed_target: S3Target, monkeypatch: pytest.MonkeyPatch) -> None:
    other = aws_home / "elsewhere"
    other.mkdir()
    (other / "creds").write_text(
        f"[default]\naws_access_key_id = {seaweed_target.access_key_id}\n"
        f"aws_secret_access_key = {seaweed_target.secret_access_key}\n")
    (other / "conf").write_text(
        f"[default]\nregion = us-east-1\ns3 =\n  endpoint_url = {seaweed_target.endpoint}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(other / "creds"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(other / "conf"))
    ds = await alance.write_dataset(TABLE, _uri(seaweed_target))
    assert await ds.count_rows() == 3


async def test_no_credentials_is_a_clear_error(aws_home: Path) -> None:
    with pytest.raises(PermissionDeniedError) as info:
        await alance.open_dataset("s3://some-bucket/ds", storage_options={
            "aws_endpoint": f"http://127.0.0.1:{_closed_port()}", "aws_region": "us-east-1"})
    text = str(info.value)
    assert "no credentials found for s3://some-bucket" in text
    for source in ("storage options", "environment", "web identity", "shared credentials file",
                   "config file", "container credentials", "instance metadata"):
        assert source in text


async def test_metadata_disabled(aws_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(PermissionDeniedError, match="AWS_EC2_METADATA_DISABLED"):
        await alance.open_dataset("s3://some-bucket/ds", storage_options={
            "aws_endpoint": f"http://127.0.0.1:{_closed_port()}", "aws_region": "us-east-1"})


class _Imds(http.server.BaseHTTPRequestHandler):
    """An IMDSv2 service (token, then role name, then role credentials)."""

    keys: tuple[str, str] = ("", "")
    seen: list[str] = []  # noqa: RUF012

    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        self.seen.append(f"PUT {self.path}")
        self._answer("TOKEN123")

    def do_GET(self) -> None:
        self.seen.append(f"GET {self.path} {self.headers.get('X-aws-ec2-metadata-token')}")
        base = "/latest/meta-data/iam/security-credentials/"
        if self.headers.get("X-aws-ec2-metadata-token") != "TOKEN123":
            self.send_response(401)
            self.end_headers()
        elif self.path == base:
            self._answer("the-role")
        elif self.path == base + "the-role":
            self._answer(json.dumps({"AccessKeyId": self.keys[0], "SecretAccessKey": self.keys[1],
                                     "Token": None, "Expiration": "2999-01-01T00:00:00Z"}))
        else:
            self.send_response(404)
            self.end_headers()

    def _answer(self, body: str) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())


@pytest.fixture
def imds(seaweed_target: S3Target) -> Iterator[str]:
    _Imds.keys = (seaweed_target.access_key_id, seaweed_target.secret_access_key)
    _Imds.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Imds)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_instance_metadata_last(aws_home: Path, seaweed_target: S3Target,
                                      imds: str) -> None:
    options = {"aws_endpoint": seaweed_target.endpoint, "aws_region": "us-east-1",
               "metadata_endpoint": imds}
    ds = await alance.write_dataset(TABLE, _uri(seaweed_target), storage_options=options)
    assert await ds.count_rows() == 3
    assert _Imds.seen[0] == "PUT /latest/api/token"
    assert "GET /latest/meta-data/iam/security-credentials/the-role TOKEN123" in _Imds.seen


def test_profile_errors(aws_home: Path) -> None:
    with pytest.raises(InvalidInputError, match="'nope' is in neither"):
        aws_credentials.resolve("b", {}, "nope")
    (aws_home / ".aws" / "config").write_text(
        "[profile role]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = default\n"
        "[profile sso]\nsso_start_url = https://x\nsso_role_name = r\n"
        "[profile empty]\nregion = eu-west-1\n")
    with pytest.raises(UnsupportedFeatureError, match="credential_process"):
        aws_credentials.resolve("b", {}, "role")
    with pytest.raises(UnsupportedFeatureError, match="SSO"):
        aws_credentials.resolve("b", {}, "sso")
    with pytest.raises(PermissionDeniedError, match="no credentials found"):
        aws_credentials.resolve("b", {}, "empty")


def test_resolution_order(aws_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (aws_home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = s\n")
    (aws_home / ".aws" / "config").write_text(
        "[default]\nregion = eu-west-3\nendpoint_url = http://from-profile:1\n")
    got = aws_credentials.resolve("b", {}, None)
    assert got.config == {"access_key_id": "FILEKEY", "secret_access_key": "s",
                          "region": "eu-west-3", "endpoint": "http://from-profile:1"}
    # Storage options and the environment beat the profile's region and endpoint.
    got = aws_credentials.resolve("b", {"region": "us-west-2"}, None)
    assert "region" not in got.config
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://from-env:1")
    assert "endpoint" not in aws_credentials.resolve("b", {}, None).config
    # Web identity in the environment comes before the shared files (obstore calls STS).
    token = aws_home / "token"
    token.write_text("jwt")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/x")
    got = aws_credentials.resolve("b", {}, None)
    assert got.source.startswith("web identity") and "access_key_id" not in got.config
    # Keys in the environment come first of all.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ENVKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert aws_credentials.resolve("b", {}, None).source.startswith("environment")
