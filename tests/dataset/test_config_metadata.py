"""Dataset config, table / schema / field metadata (alance.dataset.evolution.config), both APIs,
with
pylance 14 as the oracle for the on-disk form, and automatic cleanup driven by the config."""

from __future__ import annotations

import datetime as dt
import logging
import time
import warnings
from pathlib import Path

import lance
import pyarrow as pa
import pytest

import alance
from alance import sync as al
from alance.dataset.commit.loop import transaction_of
from alance.dataset.evolution.config import MetadataUpdate, split_field_path
from alance.dataset.versions.auto_cleanup import (
    AutoCleanupPolicy,
    auto_cleanup_config,
    format_duration,
    parse_duration,
)
from alance.errors import IncompatibleTransactionError, InvalidInputError, NotFoundError


def table() -> pa.Table:
    schema = pa.schema([pa.field("a", pa.int64(), metadata={"thisis": "a"}),
                        pa.field("s", pa.struct([pa.field("x", pa.int64()),
                                                 pa.field("dot.ted", pa.string())]))],
                       metadata={"foo": "bar"})
    return pa.table({"a": [1, 2, 3], "s": [{"x": i, "dot.ted": str(i)} for i in range(3)]},
                    schema=schema)


def simple() -> pa.Table:
    return pa.table({"a": pa.array([1, 2, 3], pa.int64())})


async def write(uri: str) -> alance.LanceDataset:
    return await alance.write_dataset(simple(), uri)


def field_meta(ds: alance.LanceDataset, *names: str) -> dict[str, str]:
    field = ds.schema.field(names[0])
    for name in names[1:]:
        field = field.type.field(name)
    return {k.decode(): v.decode() for k, v in (field.metadata or {}).items()}


# -- the async API --------------------------------------------------------------------------------


async def test_config_merge_remove_replace(uri: str) -> None:
    ds = await write(uri)
    assert ds.config() == {}
    first = await ds.update_config({"k1": "v1", "k2": "v2"})
    assert isinstance(first, MetadataUpdate)
    assert first.dataset.version == ds.version + 1 and ds.config() == {}  # ds is a fixed view
    assert first.values == first.dataset.config() == {"k1": "v1", "k2": "v2"}
    second = await first.dataset.update_config({"k1": "new", "k2": None, "k3": "v3",
                                                "absent": None})
    assert second.values == {"k1": "new", "k3": "v3"}
    third = await second.dataset.update_config({"only": "x", "ignored": None}, replace=True)
    assert third.values == {"only": "x"}
    cleared = await third.dataset.update_config({}, replace=True)
    assert cleared.values == {} and cleared.dataset.version == ds.version + 4
    again = await alance.open_dataset(uri)
    assert again.version == cleared.dataset.version and again.config() == {}


async def test_delete_config_keys(uri: str) -> None:
    ds = (await (await write(uri)).update_config({"a": "1", "b": "2"})).dataset
    new = await ds.delete_config_keys(["a", "missing"])
    assert new.config() == {"b": "2"} and new.version == ds.version + 1
    with pytest.raises(TypeError):
        await new.delete_config_keys("b")  # a lone string is not a list of keys
    with pytest.raises(TypeError):
        await new.delete_config_keys([1])


async def test_table_metadata(uri: str) -> None:
    ds = await write(uri)
    assert ds.metadata == {}
    up = await ds.update_metadata({"author": "me", "ver": "1"})
    assert up.values == up.dataset.metadata == {"author": "me", "ver": "1"}
    up = await up.dataset.update_metadata({"ver": None, "x": "y"})
    assert up.values == {"author": "me", "x": "y"}
    up = await up.dataset.update_metadata({"z": "1"}, replace=True)
    assert up.values == {"z": "1"}
    assert up.dataset.config() == {}  # the other maps are untouched
    versions = await up.dataset.versions()
    assert versions[-1]["metadata"] == {"z": "1"}


async def test_schema_metadata(uri: str) -> None:
    ds = await alance.write_dataset(table(), uri)
    assert ds.schema_metadata == {"foo": "bar"}
    up = await ds.update_schema_metadata({"k": "v"})
    assert up.values == {"foo": "bar", "k": "v"}
    assert up.dataset.schema.metadata == {b"foo": b"bar", b"k": b"v"}
    up = await up.dataset.update_schema_metadata({"foo": None})
    assert up.values == {"k": "v"}
    up = await up.dataset.update_schema_metadata({"only": "x"}, replace=True)
    assert up.dataset.schema.metadata == {b"only": b"x"}
    # the field metadata is untouched, and the data reads as before
    assert field_meta(up.dataset, "a") == {"thisis": "a"}
    assert (await up.dataset.to_table()).column("a").to_pylist() == [1, 2, 3]


async def test_field_metadata_by_path_and_id(uri: str) -> None:
    ds = await alance.write_dataset(table(), uri)
    new = await ds.update_field_metadata({"a": {"k": "v"}, "s.x": {"unit": "m"},
                                          "s.`dot.ted`": {"q": "1"}})
    assert new.version == ds.version + 1
    assert field_meta(new, "a") == {"thisis": "a", "k": "v"}
    assert field_meta(new, "s", "x") == {"unit": "m"}
    assert field_meta(new, "s", "dot.ted") == {"q": "1"}
    s_id = new.lance_schema.field("s").id
    new = await new.update_field_metadata({s_id: {"struct": "yes"}, "a": {"k": None}})
    assert field_meta(new, "s") == {"struct": "yes"}
    assert field_meta(new, "a") == {"thisis": "a"}
    new = await new.update_field_metadata({"a": {"only": "1", "gone": None}}, replace=True)
    assert field_meta(new, "a") == {"only": "1"}
    assert field_meta(new, "s", "x") == {"unit": "m"}  # other fields untouched
    assert new.schema_metadata == {"foo": "bar"}


async def test_empty_updates_still_commit(uri: str) -> None:
    # as pylance: every call commits a version, even one that changes nothing
    ds = await write(uri)
    new = await ds.update_field_metadata({})
    assert new.version == ds.version + 1
    assert (await new.update_config({})).dataset.version == ds.version + 2


async def test_bad_arguments_commit_nothing(uri: str) -> None:
    ds = await alance.write_dataset(table(), uri)
    with pytest.raises(NotFoundError, match=r"Field 'nope' not found.*'s\.x'") as err:
        await ds.update_field_metadata({"nope": {"k": "v"}})
    assert isinstance(err.value, OSError)  # as pylance's error
    for bad in ("s.nope", "a.x", "s..x", "`s", "", "s.dot.ted", "s.`dot`.ted"):
        with pytest.raises(NotFoundError):
            await ds.update_field_metadata({bad: {"k": "v"}})
    with pytest.raises(NotFoundError, match="Field ID 99"):
        await ds.update_field_metadata({99: {"k": "v"}})
    for values in (None, [("a", "b")], {"a": 1}, {1: "a"}, {"a": b"x"}):
        with pytest.raises(TypeError):
            await ds.update_config(values)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError):
            await ds.update_metadata(values)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        await ds.update_field_metadata({"a": "text"})  # type: ignore[dict-item]
    with pytest.raises(TypeError):
        await ds.update_field_metadata({True: {"k": "v"}})
    with pytest.raises(TypeError):
        await ds.update_schema_metadata({"k": "v"}, replace="yes")  # type: ignore[arg-type]
    assert (await alance.open_dataset(uri)).version == ds.version


async def test_deprecated_replacements(uri: str) -> None:
    ds = await alance.write_dataset(table(), uri)
    with pytest.warns(DeprecationWarning, match="replace_schema_metadata"):
        ds = await ds.replace_schema_metadata({"new": "1"})
    assert ds.schema_metadata == {"new": "1"}
    with pytest.warns(DeprecationWarning, match="replace_field_metadata"):
        ds = await ds.replace_field_metadata("a", {"z": "9"})
    assert field_meta(ds, "a") == {"z": "9"}


async def test_committed_as_update_config_maps(uri: str) -> None:
    """Fields 6-9 of UpdateConfig (the form pylance 14 writes), never the older ones."""
    ds = await alance.write_dataset(table(), uri)
    ds = (await ds.update_config({"k": "v", "d": None})).dataset
    ds = (await ds.update_schema_metadata({}, replace=True)).dataset
    ds = await ds.update_field_metadata({"s.x": {"u": "m"}}, replace=True)
    ds = (await ds.update_metadata({"t": "1"})).dataset
    txns = [await transaction_of(ds._store, (await ds.checkout_version(v))._snapshot)
            for v in range(2, 6)]
    ops = [t.update_config for t in txns if t is not None]
    assert len(ops) == 4
    for op in ops:
        assert not op.upsert_values and not op.delete_keys
        assert not op.schema_metadata and not op.field_metadata
    config, schema_meta, fields, table_meta = ops
    assert [(e.key, e.HasField("value")) for e in config.config_updates.update_entries] == [
        ("k", True), ("d", False)]
    assert not config.config_updates.replace
    assert schema_meta.HasField("schema_metadata_updates")
    assert schema_meta.schema_metadata_updates.replace
    assert not schema_meta.schema_metadata_updates.update_entries
    x_id = next(f.id for f in ds.lance_schema.walk() if f.name == "x")
    assert list(fields.field_metadata_updates) == [x_id]
    assert fields.field_metadata_updates[x_id].replace
    assert table_meta.HasField("table_metadata_updates")
    assert not table_meta.HasField("config_updates")


# -- concurrent commits (Lance's rules for UpdateConfig) ---------------------------------------


async def test_concurrent_config_updates_of_other_keys_merge(uri: str) -> None:
    base = await write(uri)
    await base.update_config({"k1": "a"})
    mine = await base.update_config({"k2": "b"})  # planned on base: rebased over the first
    assert mine.dataset.version == base.version + 2
    assert mine.values == {"k1": "a", "k2": "b"}  # the post image holds both


@pytest.mark.parametrize("theirs, mine", [
    ({"k": "a"}, {"k": "b"}),      # both set k
    ({"k": "a"}, {"k": None}),     # we remove what they set
    ({"k": None}, {"k": "b"}),     # we set what they removed
])
async def test_concurrent_config_updates_of_one_key_conflict(
        uri: str, theirs: dict[str, str | None], mine: dict[str, str | None]) -> None:
    base = (await (await write(uri)).update_config({"k": "0"})).dataset
    await base.update_config(theirs)
    with pytest.raises(IncompatibleTransactionError):
        await base.update_config(mine)


async def test_concurrent_removals_of_one_key_are_compatible(uri: str) -> None:
    base = (await (await write(uri)).update_config({"k": "0", "j": "1"})).dataset
    await base.delete_config_keys(["k"])
    assert (await base.delete_config_keys(["k", "j"])).config() == {}


async def test_concurrent_schema_and_field_metadata(uri: str) -> None:
    base = await alance.write_dataset(table(), uri)
    await base.update_schema_metadata({"k": "1"})
    with pytest.raises(IncompatibleTransactionError):
        await base.update_schema_metadata({"other": "2"})  # both change the schema metadata
    await base.update_field_metadata({"a": {"k": "1"}})
    with pytest.raises(IncompatibleTransactionError):
        await base.update_field_metadata({"a": {"j": "2"}, "s": {"x": "y"}})
    new = await base.update_field_metadata({"s.x": {"j": "2"}})  # another field: fine
    assert field_meta(new, "a") == {"thisis": "a", "k": "1"}
    assert field_meta(new, "s", "x") == {"j": "2"}
    # config and table metadata do not touch the schema: compatible with all of the above
    up = await base.update_config({"c": "1"})
    assert up.dataset.schema_metadata == {"foo": "bar", "k": "1"}
    # table metadata is not checked (as in Lance): the later commit's value wins
    await base.update_metadata({"t": "first"})
    assert (await base.update_metadata({"t": "second"})).values == {"t": "second"}


async def test_config_update_vs_concurrent_data_commits(uri: str) -> None:
    base = await write(uri)
    await alance.write_dataset(simple(), uri, mode="append")
    up = await base.update_config({"k": "v"})
    assert up.dataset.config() == {"k": "v"}
    assert await up.dataset.count_rows() == 6  # built on the newest version
    # an overwrite replaces the schema: a concurrent schema metadata change conflicts with it,
    # a config change of other keys does not
    base = await alance.open_dataset(uri)
    await alance.write_dataset(simple(), uri, mode="overwrite")
    assert (await base.update_config({"j": "w"})).values == {"k": "v", "j": "w"}
    with pytest.raises(IncompatibleTransactionError):
        await base.update_schema_metadata({"s": "1"})
    with pytest.raises(IncompatibleTransactionError):
        await base.update_field_metadata({"a": {"s": "1"}})


# -- the blocking facade ------------------------------------------------------------------------


def test_sync_calls_move_the_object(local_uri: str) -> None:
    ds = al.write_dataset(table(), local_uri)
    v = ds.version
    assert ds.update_config({"k": "v"}) == {"k": "v"} and ds.version == v + 1
    assert ds.config() == {"k": "v"}
    assert ds.update_metadata({"t": "1"}) == {"t": "1"} and ds.metadata == {"t": "1"}
    assert ds.update_schema_metadata({"s": "1"}) == {"foo": "bar", "s": "1"}
    assert ds.schema_metadata == {"foo": "bar", "s": "1"}
    assert ds.update_field_metadata({"s.x": {"f": "1"}}) is None
    assert ds.schema.field("s").type.field("x").metadata == {b"f": b"1"}
    assert ds.delete_config_keys(["k"]) is None and ds.config() == {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ds.replace_schema_metadata({"only": "x"}) is None
        assert ds.replace_field_metadata("a", {"z": "1"}) is None
    assert [w.category for w in caught] == [DeprecationWarning, DeprecationWarning]
    assert all(w.filename == __file__ for w in caught)  # pointing at the caller
    assert ds.schema.metadata == {b"only": b"x"}
    assert ds.schema.field("a").metadata == {b"z": b"1"}
    assert ds.version == v + 7 == ds.latest_version
    old = ds.checkout_version(v)
    assert old.config() == {} and old.schema_metadata == {"foo": "bar"}
    with pytest.raises(OSError, match="not found"):
        ds.update_field_metadata({"zz": {"k": "v"}})
    assert ds.version == v + 7


# -- interop with pylance -----------------------------------------------------------------------


def test_alance_writes_pylance_reads(local_uri: str) -> None:
    ds = al.write_dataset(table(), local_uri)
    ds.update_config({"k": "v", "gone": "x"})
    ds.delete_config_keys(["gone"])
    ds.update_metadata({"author": "me"})
    ds.update_schema_metadata({"s": "1"})
    ds.update_field_metadata({"s.x": {"unit": "m"}, "a": {"thisis": None, "n": "1"}})
    ds.update_field_metadata({"s.`dot.ted`": {"q": "1"}}, replace=True)
    theirs = lance.dataset(local_uri)
    assert theirs.version == ds.version
    assert theirs.config() == {"k": "v"}
    assert theirs.metadata == {"author": "me"}
    assert theirs.schema_metadata == {"foo": "bar", "s": "1"}
    assert theirs.schema == ds.schema
    by_name = {f.name(): f for f in theirs.lance_schema.fields()}
    assert by_name["a"].metadata == {"n": "1"}
    assert by_name["s"].children()[0].metadata == {"unit": "m"}
    assert by_name["s"].children()[1].metadata == {"q": "1"}
    # pylance reads alance's transactions as UpdateConfig and applies its conflict rules
    old = lance.dataset(local_uri, version=ds.version - 1)
    ds.update_config({"race": "alance"})
    with pytest.raises(OSError, match=r"(?i)conflict"):
        old.update_config({"race": "pylance"})
    old = lance.dataset(local_uri, version=ds.version - 1)
    assert old.update_config({"other": "1"}) == {"k": "v", "race": "alance", "other": "1"}
    assert al.open_dataset(local_uri).config() == {"k": "v", "race": "alance", "other": "1"}


def test_pylance_writes_alance_reads(local_uri: str) -> None:
    theirs = lance.write_dataset(table(), local_uri)
    theirs.update_config({"k": "v"})
    theirs.update_metadata({"author": "them"})
    theirs.update_schema_metadata({"foo": None, "s": "1"})
    theirs.update_field_metadata({"s.x": {"unit": "m"}})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        theirs.replace_field_metadata("a", {"only": "1"})
    ds = al.open_dataset(local_uri)
    assert ds.version == theirs.version
    assert ds.config() == theirs.config() == {"k": "v"}
    assert ds.metadata == {"author": "them"}
    assert ds.schema_metadata == {"s": "1"}
    assert ds.schema == theirs.schema
    assert ds.schema.field("a").metadata == {b"only": b"1"}
    # alance reads pylance's transactions and applies the same rules
    old = al.open_dataset(local_uri, theirs.version)
    theirs.update_config({"race": "pylance"})
    theirs.update_field_metadata({"a": {"p": "1"}})
    with pytest.raises(IncompatibleTransactionError):
        old.update_config({"race": "alance"})
    with pytest.raises(IncompatibleTransactionError):
        old.update_field_metadata({"a": {"x": "1"}})
    old.update_field_metadata({"s": {"x": "1"}})
    assert lance.dataset(local_uri).lance_schema.fields()[1].metadata == {"x": "1"}
    assert old.config() == {"k": "v", "race": "pylance"}


# -- automatic cleanup --------------------------------------------------------------------------


def test_durations() -> None:
    assert parse_duration("1ms") == dt.timedelta(milliseconds=1)
    assert parse_duration("14days") == dt.timedelta(days=14)
    assert parse_duration("1day 1h 1m 1s") == dt.timedelta(seconds=90061)
    assert parse_duration("2weeks 3hours") == dt.timedelta(weeks=2, hours=3)
    assert parse_duration("100s") == dt.timedelta(seconds=100)
    for bad in ("", "1", "s", "1 parsec", "-1s", "1.5h"):
        with pytest.raises(InvalidInputError):
            parse_duration(bad)
    # the notation pylance writes for auto_cleanup_options
    for secs, text in ((3600, "1h"), (90061, "1day 1h 1m 1s"), (0, "0s"),
                       (1209600, "14days"), (59, "59s")):
        assert format_duration(secs) == text
        assert parse_duration(text) == dt.timedelta(seconds=secs)
    assert auto_cleanup_config(5, 3600) == {"lance.auto_cleanup.interval": "5",
                                            "lance.auto_cleanup.older_than": "1h"}
    assert split_field_path("`a``b`.c") == ["a`b", "c"]
    assert AutoCleanupPolicy.from_config({}) is None
    policy = AutoCleanupPolicy.from_config({"lance.auto_cleanup.interval": "3",
                                            "lance.auto_cleanup.retain_versions": "2"})
    assert policy == AutoCleanupPolicy(3, None, 2)
    with pytest.raises(InvalidInputError):
        AutoCleanupPolicy.from_config({"lance.auto_cleanup.interval": "0"})


def _versions(uri: str) -> list[int]:
    return [v["version"] for v in al.open_dataset(uri).versions()]


def test_auto_cleanup_after_commits(local_uri: str) -> None:
    ds = al.write_dataset(simple(), local_uri)
    ds.update_config({"lance.auto_cleanup.interval": "1",
                      "lance.auto_cleanup.older_than": "0s"})
    assert _versions(local_uri) == [1, 2]  # seen from version 1: nothing older to remove
    for _ in range(3):
        al.write_dataset(simple(), local_uri, mode="append")
    # each commit keeps the version it was built on and itself
    assert _versions(local_uri) == [4, 5]
    assert al.open_dataset(local_uri).count_rows() == 12
    assert lance.dataset(local_uri).count_rows() == 12
    # every other version, and keep the newest 3 whatever their age
    ds = al.open_dataset(local_uri)
    ds.update_config({"lance.auto_cleanup.interval": "2",
                      "lance.auto_cleanup.older_than": None,
                      "lance.auto_cleanup.retain_versions": "3"})  # version 6
    assert _versions(local_uri) == [4, 5, 6]
    al.write_dataset(simple(), local_uri, mode="append")  # 7: odd, nothing happens
    assert _versions(local_uri) == [4, 5, 6, 7]
    al.write_dataset(simple(), local_uri, mode="append")  # 8
    assert _versions(local_uri) == [6, 7, 8]
    ds = al.open_dataset(local_uri)
    ds.delete_config_keys(["lance.auto_cleanup.interval"])  # 9
    al.write_dataset(simple(), local_uri, mode="append")  # 10: no cleanup any more
    assert _versions(local_uri) == [6, 7, 8, 9, 10]


def test_auto_cleanup_keeps_recent_versions(local_uri: str) -> None:
    ds = al.write_dataset(simple(), local_uri)
    ds.update_config({"lance.auto_cleanup.interval": "1",
                      "lance.auto_cleanup.older_than": "1h"})
    for _ in range(3):
        al.write_dataset(simple(), local_uri, mode="append")
    assert _versions(local_uri) == [1, 2, 3, 4, 5]


def test_bad_auto_cleanup_config_is_logged(local_uri: str,
                                           caplog: pytest.LogCaptureFixture) -> None:
    ds = al.write_dataset(simple(), local_uri)
    with caplog.at_level(logging.ERROR, logger="alance.dataset.evolution.config"):
        ds.update_config({"lance.auto_cleanup.interval": "1",
                          "lance.auto_cleanup.older_than": "soon"})
        al.write_dataset(simple(), local_uri, mode="append")
    assert al.open_dataset(local_uri).version == 3  # the commits themselves succeed
    assert "soon" in caplog.text
    assert _versions(local_uri) == [1, 2, 3]


def test_auto_cleanup_interop(tmp_path: Path) -> None:
    # pylance's auto_cleanup_options are honoured by alance's commits...
    theirs = str(tmp_path / "theirs.lance")
    lance.write_dataset(simple(), theirs, auto_cleanup_options={"interval": 2,
                                                                "older_than_seconds": 0})
    for _ in range(3):
        al.write_dataset(simple(), theirs, mode="append")  # versions 2, 3, 4
    assert _versions(theirs) == [3, 4]  # 2 removed nothing (seen from 1), 4 removed 1 and 2
    # ...and the config alance sets is honoured by pylance's commits
    ours = str(tmp_path / "ours.lance")
    al.write_dataset(simple(), ours).update_config(
        auto_cleanup_config(interval=1, older_than_seconds=0))
    time.sleep(0.01)
    for _ in range(2):
        lance.write_dataset(simple(), ours, mode="append")
    assert _versions(ours) == [3, 4]


def test_auto_cleanup_options_and_optimizer_switches(tmp_path: Path) -> None:
    """write_dataset(auto_cleanup_options=...) on create and ds.optimize.enable/disable:
    as in pylance, the config keys make later commits clean up old versions."""
    from alance import sync as al

    table = pa.table({"a": range(10)})
    uri = str(tmp_path / "ds")
    opts = al.AutoCleanupConfig(interval=1, older_than_seconds=1)
    al.write_dataset(table, uri, auto_cleanup_options=opts)
    cfg = lance.dataset(uri).config()
    assert cfg["lance.auto_cleanup.interval"] == "1"
    for _ in range(2):
        al.write_dataset(table, uri, mode="append")
    time.sleep(1.2)
    al.write_dataset(table, uri, mode="append")
    # the cleanup after the last commit ran from the version before it, as pylance's does
    assert len(lance.dataset(uri).versions()) == 2

    other = str(tmp_path / "other")
    ds = al.write_dataset(table, other)
    al.write_dataset(table, other, mode="append", auto_cleanup_options=opts)  # not a create
    assert "lance.auto_cleanup.interval" not in lance.dataset(other).config()
    ds = al.open_dataset(other)
    ds.optimize.enable_auto_cleanup(opts)
    assert ds.version == 3
    assert lance.dataset(other).config()["lance.auto_cleanup.older_than"] == "1s"
    ds.optimize.disable_auto_cleanup()
    assert ds.version == 4 and "lance.auto_cleanup.interval" not in ds.config()


def test_stale_config_change_rebases_over_cleaned_up_versions(tmp_path: Path) -> None:
    """Versions removed by cleanup since a config change's read version are skipped, as
    pylance skips them; the change lands on the newest version."""
    from alance import sync
    uri = str(tmp_path / "ds")
    table = pa.table({"a": range(10)})
    stale = sync.write_dataset(table, uri)
    stale.update_config({"k": "1"})  # version 2
    for _ in range(3):
        sync.write_dataset(table, uri, mode="append")  # versions 3..5
    latest = sync.open_dataset(uri)
    latest.cleanup_old_versions(older_than=dt.timedelta(0))
    assert [v["version"] for v in latest.versions()] == [5]
    stale.update_config({"k": "2"})
    assert stale.version == 6 and stale.count_rows() == 40
    assert sync.open_dataset(uri).config()["k"] == "2"
    assert lance.dataset(uri).config()["k"] == "2"
