"""DynamoDB as the external manifest store, in the table layout Lance itself uses.

The table has the key ``base_uri`` (string, HASH) + ``version`` (number, RANGE); each item also
holds ``path`` (string: the manifest's path inside the bucket), ``committer`` (string), ``size``
(number) and, when known, ``e_tag`` (string). pylance (``s3+ddb://`` URIs) and alance can
therefore commit to the same dataset through the same table.

The layout is checked with ``DescribeTable`` the first time a process uses a table. Every read
is strongly consistent. A conditional create whose response is lost (timeout, connection reset,
or a retry that then fails its own condition) is settled by reading the item back: the staged
path in it is unique to one commit attempt, so it tells whose create landed.

Use it through a URI, as with pylance::

    ds = await alance.write_dataset(table, "s3+ddb://bucket/path?ddbTableName=lance-commits",
                                    storage_options={"dynamodb_endpoint": "http://..."})

The endpoint comes from the storage option ``dynamodb_endpoint``, else the environment variable
``DYNAMODB_ENDPOINT``, else AWS; credentials and region from the same storage options as S3.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlparse

from alance.commit import aws
from alance.commit.external import (
    ExternalEntry,
    ExternalManifestCommitHandler,
    ExternalManifestStore,
    StepObserver,
)
from alance.errors import (
    CommitConflictError,
    CorruptFileError,
    InvalidInputError,
    NotFoundError,
    TransientStoreError,
)
from alance.io.deadline import DEFAULT_SLOW_WARNING

#: The URI scheme and its one query parameter, as pylance spells them.
URI_SCHEME = "s3+ddb"
TABLE_NAME_QUERY_KEY = "ddbTableName"
ENDPOINT_OPTION = "dynamodb_endpoint"
ENDPOINT_ENV = "DYNAMODB_ENDPOINT"
#: The ``committer`` attribute alance writes (pylance writes ``lancedb``).
DEFAULT_COMMITTER = "alance"
#: alance's own attempts of an idempotent call (each one already retried by botocore).
MAX_ATTEMPTS = 4
#: How long a conditional create whose outcome is unknown keeps trying to settle it.
SETTLE_DEADLINE = 30.0
RETRY_BASE_DELAY = 0.05

log = logging.getLogger(__name__)

_KEY_SCHEMA = {("base_uri", "HASH"): "S", ("version", "RANGE"): "N"}
_CREATE_CONDITION = "attribute_not_exists(#b) AND attribute_not_exists(#v)"
_UPDATE_CONDITION = "attribute_exists(#b) AND attribute_exists(#v)"
_NAMES = {"#b": "base_uri", "#v": "version"}

#: Tables whose layout this process checked: ``(endpoint, region, table)``.
_checked: set[tuple[str | None, str | None, str]] = set()


class _ConditionFailed(Exception):
    def __init__(self, item: dict[str, Any] | None) -> None:
        super().__init__("conditional check failed")
        self.item = item


def _delay(attempt: int) -> float:
    return random.uniform(0, min(RETRY_BASE_DELAY * 2 ** attempt, 1.0))


class DynamoDBManifestStore(ExternalManifestStore):
    """An :class:`ExternalManifestStore` on one DynamoDB table (see the module doc).

    Args:
        table_name: the table (it must exist, with Lance's key layout).
        settings: endpoint, region and credentials (default: AWS, botocore's chain).
        committer: the value of the ``committer`` attribute of items this store writes.
    """

    def __init__(self, table_name: str, settings: aws.AwsSettings | None = None, *,
                 committer: str = DEFAULT_COMMITTER) -> None:
        if not table_name:
            raise InvalidInputError("a DynamoDB table name is required")
        aws.require_sdk()
        self.table_name = table_name
        self.settings = settings or aws.AwsSettings.from_storage_options(None)
        self.committer = committer

    def __repr__(self) -> str:
        return (f"DynamoDBManifestStore({self.table_name!r}, "
                f"endpoint={self.settings.endpoint!r})")

    # -- plumbing ----------------------------------------------------------------------------
    async def _client(self) -> Any:
        client = await aws.client("dynamodb", self.settings)
        key = (self.settings.endpoint, self.settings.region, self.table_name)
        if key not in _checked:
            await self._check_table(client)
            _checked.add(key)
        return client

    async def _check_table(self, client: Any) -> None:
        what = f"DynamoDB table {self.table_name!r}"
        try:
            described = await self._retried(client, "describe_table", TableName=self.table_name)
        except NotFoundError as exc:
            raise NotFoundError(f"{what} does not exist (create it with HASH key base_uri (S) "
                                f"and RANGE key version (N))") from exc
        table = described.get("Table", {})
        types = {a["AttributeName"]: a["AttributeType"]
                 for a in table.get("AttributeDefinitions", [])}
        found = {(k["AttributeName"], k["KeyType"]): types.get(k["AttributeName"])
                 for k in table.get("KeySchema", [])}
        if found != _KEY_SCHEMA:
            shown = ", ".join(f"{n} {t} ({ty})" for (n, t), ty in found.items()) or "none"
            raise InvalidInputError(
                f"{what} has the key schema [{shown}]; Lance's commit protocol needs HASH key "
                "base_uri (S) and RANGE key version (N)")

    async def _call(self, client: Any, op: str, **params: Any) -> dict[str, Any]:
        started = time.monotonic()
        try:
            result: dict[str, Any] = await getattr(client, op)(**params)
            took = time.monotonic() - started
            if took >= DEFAULT_SLOW_WARNING:
                log.warning("slow DynamoDB %s on %s: %.3g s (slow_warning is %.3g s)", op,
                            self.table_name, took, DEFAULT_SLOW_WARNING)
            elif log.isEnabledFor(logging.DEBUG):
                log.debug("DynamoDB %s on %s in %.2f ms", op, self.table_name, took * 1e3)
            return result
        except Exception as exc:
            if aws.error_code(exc) == "ConditionalCheckFailedException":
                item = getattr(exc, "response", {}).get("Item")
                raise _ConditionFailed(item) from exc
            raise aws.map_error(exc, f"DynamoDB {op} on {self.table_name}") from exc

    async def _retried(self, client: Any, op: str, **params: Any) -> dict[str, Any]:
        """An idempotent call, tried again on transient failures."""
        for attempt in range(MAX_ATTEMPTS):
            try:
                return await self._call(client, op, **params)
            except TransientStoreError as exc:
                if attempt == MAX_ATTEMPTS - 1:
                    log.warning("DynamoDB %s on %s: giving up after %d attempts: %s", op,
                                self.table_name, attempt + 1, exc)
                    raise
                pause = _delay(attempt)
                log.info("DynamoDB %s on %s: transient failure (attempt %d of %d), retrying "
                         "in %.3f s: %s", op, self.table_name, attempt + 1, MAX_ATTEMPTS,
                         pause, exc)
                await asyncio.sleep(pause)
        raise AssertionError("unreachable")

    def _item(self, base_uri: str, entry: ExternalEntry) -> dict[str, Any]:
        item: dict[str, Any] = {
            "base_uri": {"S": base_uri},
            "version": {"N": str(entry.version)},
            "path": {"S": entry.path},
            "committer": {"S": self.committer},
        }
        if entry.size is not None:
            item["size"] = {"N": str(entry.size)}
        if entry.e_tag is not None:
            item["e_tag"] = {"S": entry.e_tag}
        return item

    def _entry(self, item: Mapping[str, Any]) -> ExternalEntry:
        try:
            version = int(item["version"]["N"])
            path = str(item["path"]["S"])
            size = int(item["size"]["N"]) if "size" in item else None
            e_tag = str(item["e_tag"]["S"]) if "e_tag" in item else None
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"malformed item in DynamoDB table {self.table_name}: "
                                   f"{dict(item)!r}") from exc
        return ExternalEntry(version, path, size, e_tag)

    # -- ExternalManifestStore ---------------------------------------------------------------
    async def get(self, base_uri: str, version: int) -> ExternalEntry | None:
        client = await self._client()
        got = await self._retried(client, "get_item", TableName=self.table_name,
                                  Key={"base_uri": {"S": base_uri}, "version": {"N": str(version)}},
                                  ConsistentRead=True)
        item = got.get("Item")
        return self._entry(item) if item else None

    async def latest(self, base_uri: str) -> ExternalEntry | None:
        client = await self._client()
        got = await self._retried(client, "query", TableName=self.table_name,
                                  KeyConditionExpression="#b = :b",
                                  ExpressionAttributeNames={"#b": "base_uri"},
                                  ExpressionAttributeValues={":b": {"S": base_uri}},
                                  ScanIndexForward=False, Limit=1, ConsistentRead=True)
        items = got.get("Items") or []
        return self._entry(items[0]) if items else None

    async def list_after(self, base_uri: str, version: int) -> list[ExternalEntry]:
        client = await self._client()
        out: list[ExternalEntry] = []
        start: dict[str, Any] | None = None
        while True:
            params: dict[str, Any] = {}
            if start is not None:
                params["ExclusiveStartKey"] = start
            got = await self._retried(
                client, "query", TableName=self.table_name,
                KeyConditionExpression="#b = :b AND #v > :v", ExpressionAttributeNames=_NAMES,
                ExpressionAttributeValues={":b": {"S": base_uri}, ":v": {"N": str(version)}},
                ScanIndexForward=True, ConsistentRead=True, **params)
            out.extend(self._entry(i) for i in got.get("Items") or [])
            start = got.get("LastEvaluatedKey")
            if not start:
                return out

    async def put_if_not_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        client = await self._client()
        item = self._item(base_uri, entry)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_DEADLINE
        attempt = 0
        while True:
            try:
                await self._call(client, "put_item", TableName=self.table_name, Item=item,
                                 ConditionExpression=_CREATE_CONDITION,
                                 ExpressionAttributeNames=_NAMES,
                                 ReturnValuesOnConditionCheckFailure="ALL_OLD")
                return
            except _ConditionFailed as failed:
                # A lost response retried by botocore also ends here: check whose item it is.
                old = (self._entry(failed.item) if failed.item
                       else await self.get(base_uri, entry.version))
                if old is not None and old.path == entry.path:
                    return
                raise CommitConflictError(
                    f"version {entry.version} of {base_uri} was committed by another writer "
                    f"(DynamoDB table {self.table_name})") from None
            except TransientStoreError as exc:
                # The create may or may not have been applied. Read the item to find out.
                attempt += 1
                if loop.time() > deadline:
                    raise TransientStoreError(
                        f"could not learn whether version {entry.version} of {base_uri} was "
                        f"committed (DynamoDB table {self.table_name}); outcome unknown: "
                        f"{exc}") from exc
                await asyncio.sleep(_delay(attempt))
                try:
                    old = await self.get(base_uri, entry.version)
                except TransientStoreError:
                    continue
                if old is None:
                    continue  # not applied: create again
                if old.path == entry.path:
                    return
                raise CommitConflictError(
                    f"version {entry.version} of {base_uri} was committed by another writer "
                    f"(DynamoDB table {self.table_name})") from None

    async def put_if_exists(self, base_uri: str, entry: ExternalEntry) -> None:
        client = await self._client()
        try:
            await self._retried(client, "put_item", TableName=self.table_name,
                                Item=self._item(base_uri, entry),
                                ConditionExpression=_UPDATE_CONDITION,
                                ExpressionAttributeNames=_NAMES)
        except _ConditionFailed:
            raise NotFoundError(f"version {entry.version} of {base_uri} has no item in "
                                f"DynamoDB table {self.table_name}") from None


def parse_ddb_uri(uri: str) -> tuple[str, str]:
    """``(s3 URI, table name)`` of ``s3+ddb://bucket/path?ddbTableName=TABLE``.

    Like pylance, exactly one query parameter, ``ddbTableName``, with a non-empty value.
    """
    parsed = urlparse(uri)
    if parsed.scheme.lower() != URI_SCHEME:
        raise InvalidInputError(f"not an {URI_SCHEME}:// URI: {uri!r}")
    pairs = parse_qsl(parsed.query, keep_blank_values=True)
    if len(pairs) != 1 or pairs[0][0] != TABLE_NAME_QUERY_KEY:
        raise InvalidInputError(f"{uri!r}: an {URI_SCHEME}:// URI takes exactly one query "
                                f"parameter, {TABLE_NAME_QUERY_KEY}")
    if not pairs[0][1]:
        raise InvalidInputError(f"{uri!r}: {TABLE_NAME_QUERY_KEY} is empty")
    return f"s3://{parsed.netloc}{parsed.path}", pairs[0][1]


def dynamodb_endpoint(storage_options: Mapping[str, Any] | None) -> str | None:
    """The DynamoDB endpoint: storage option ``dynamodb_endpoint``, else ``$DYNAMODB_ENDPOINT``."""
    value = (storage_options or {}).get(ENDPOINT_OPTION) or os.environ.get(ENDPOINT_ENV)
    return str(value) if value else None


class DynamoDBCommitHandler(ExternalManifestCommitHandler):
    """Commits through a DynamoDB table shared with pylance (see the module doc).

    Args:
        table_name: the DynamoDB table.
        settings: endpoint, region and credentials (:class:`alance.commit.aws.AwsSettings`).
        committer: the ``committer`` attribute written with each item.
        on_step: observer of the commit steps (see :mod:`alance.commit.external`).
    """

    def __init__(self, table_name: str, settings: aws.AwsSettings | None = None, *,
                 committer: str = DEFAULT_COMMITTER, on_step: StepObserver | None = None,
                 ) -> None:
        super().__init__(DynamoDBManifestStore(table_name, settings, committer=committer),
                         on_step=on_step)

    @classmethod
    def from_uri(cls, uri: str, storage_options: Mapping[str, Any] | None = None, *,
                 committer: str = DEFAULT_COMMITTER, on_step: StepObserver | None = None,
                 ) -> DynamoDBCommitHandler:
        """The handler an ``s3+ddb://...?ddbTableName=T`` URI asks for."""
        _, table = parse_ddb_uri(uri)
        settings = aws.AwsSettings.from_storage_options(
            storage_options, endpoint=dynamodb_endpoint(storage_options),
            target=f"DynamoDB table {table}")
        return cls(table, settings, committer=committer, on_step=on_step)
