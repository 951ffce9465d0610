"""Row id sequences and row version sequences: encodings, sizes, round trips, pylance's bytes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alance._proto import rowids_pb2
from alance.errors import CorruptFileError
from alance.format.row_id_sequence import (
    SEGMENT_KINDS,
    candidate_sizes,
    decode_row_ids,
    decode_segment,
    decode_u64_array,
    encode_row_id_bytes,
    encode_row_ids,
    encode_segment,
    encode_u64_array,
    encoded_array_size,
    segment_length,
)
from alance.format.row_versions import decode_versions, encode_version_bytes, uniform_versions

U64_MAX = 2**64 - 1

# distinct u64 values in arbitrary order; some clustered, some spread over the whole range
_values = st.one_of(
    st.lists(st.integers(0, 2000), unique=True, max_size=300),
    st.lists(st.integers(0, U64_MAX), unique=True, max_size=40),
    st.builds(lambda base, offs: [base + o for o in offs],
              st.integers(0, 2**63), st.lists(st.integers(0, 70000), unique=True, max_size=200)),
)
_sorted_values = _values.map(sorted)


def _arr(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.uint64)


def _small_span(values: np.ndarray) -> bool:
    return not len(values) or int(values.max()) - int(values.min()) < 10**6


@settings(max_examples=150, deadline=None)
@given(_values)
def test_every_applicable_encoding_round_trips_with_its_computed_size(values: list[int]) -> None:
    arr = _arr(values)
    sizes = candidate_sizes(arr)
    assert "array" in sizes
    for kind, size in sizes.items():
        if kind.startswith("range_with") and not _small_span(arr):
            continue  # would materialise a huge bitmap: never chosen, sizes say why
        seg = encode_segment(arr, kind)
        assert seg.WhichOneof("segment") == kind
        assert seg.ByteSize() == size
        assert segment_length(seg) == len(arr)
        assert np.array_equal(decode_segment(seg), arr)
        again = rowids_pb2.U64Segment.FromString(seg.SerializeToString())
        assert np.array_equal(decode_segment(again), arr)


@settings(max_examples=150, deadline=None)
@given(_sorted_values)
def test_sorted_values_have_all_forms_and_the_chosen_one_is_smallest(values: list[int]) -> None:
    arr = _arr(values)
    sizes = candidate_sizes(arr)
    contiguous = len(arr) == 0 or int(arr[-1]) - int(arr[0]) + 1 == len(arr)
    expected = {"array", "sorted_array"} if len(arr) else {"array", "range"}
    if len(arr) and int(arr[-1]) < U64_MAX:  # no range can end past u64::MAX
        expected |= {"range"} if contiguous else {"range_with_holes", "range_with_bitmap"}
    assert set(sizes) == expected
    chosen = encode_segment(arr)
    assert chosen.ByteSize() == min(sizes.values())
    # the whole sequence is never larger than the best single segment
    seq = encode_row_ids(arr)
    single = rowids_pb2.RowIdSequence(segments=[chosen]) if len(arr) else seq
    assert seq.ByteSize() <= single.ByteSize()
    assert np.array_equal(decode_row_ids(seq.SerializeToString(), len(arr)), arr)


@settings(max_examples=150, deadline=None)
@given(_values)
def test_sequences_round_trip_in_any_order(values: list[int]) -> None:
    arr = _arr(values)
    data = encode_row_id_bytes(arr)
    assert np.array_equal(decode_row_ids(data, len(arr)), arr)
    whole = min(candidate_sizes(arr).values())
    assert len(data) <= whole + 1 + (whole.bit_length() + 6) // 7  # one framed segment


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, U64_MAX), max_size=50))
def test_encoded_u64_array_picks_the_smallest_width(values: list[int]) -> None:
    arr = _arr(values)
    msg = encode_u64_array(arr)
    assert msg.ByteSize() == encoded_array_size(arr)
    assert np.array_equal(decode_u64_array(msg), arr)
    widths = []
    if not len(arr):
        assert msg.WhichOneof("array") == "u64_array"
        return
    span = int(arr.max()) - int(arr.min())
    base = int(arr.min())
    for name, limit, size in (("u16_array", 0xFFFF, 2), ("u32_array", 0xFFFFFFFF, 4)):
        if span <= limit:
            alt = rowids_pb2.EncodedU64Array()
            getattr(alt, name).base = base
            getattr(alt, name).offsets = (arr - np.uint64(base)).astype(f"<u{size}").tobytes()
            widths.append(alt.ByteSize())
    plain = rowids_pb2.EncodedU64Array()
    plain.u64_array.values = arr.astype("<u8").tobytes()
    widths.append(plain.ByteSize())
    assert msg.ByteSize() == min(widths)


def test_all_three_widths_occur() -> None:
    assert encode_u64_array(_arr([10, 20, 65545])).WhichOneof("array") == "u16_array"
    assert encode_u64_array(_arr([0, 70000, 5] * 1)).WhichOneof("array") == "u32_array"
    assert encode_u64_array(_arr([0, 2**40, 7])).WhichOneof("array") == "u64_array"


def test_each_segment_kind_is_chosen_for_its_shape() -> None:
    kinds = {
        "range": np.arange(100, 200),
        "range_with_holes": np.setdiff1d(np.arange(10_000), [17, 5000]),
        "range_with_bitmap": np.arange(0, 2000, 2),
        "sorted_array": np.array([5, 100_000, 300_000, 2**33]),
        "array": np.array([9, 3, 7, 1, 8, 2, 6, 4, 0, 5] * 1) * 1000,
    }
    for kind, values in kinds.items():
        seg = encode_segment(values.astype(np.uint64))
        assert seg.WhichOneof("segment") == kind, kind
    assert set(kinds) == set(SEGMENT_KINDS)


def test_long_runs_become_ranges() -> None:
    values = np.concatenate([np.arange(1000), [5000, 5007], np.arange(9000, 9100)])
    seq = encode_row_ids(values)
    kinds = [s.WhichOneof("segment") for s in seq.segments]
    assert kinds[0] == kinds[-1] == "range"
    assert seq.ByteSize() <= 32


def test_bitmap_bit_order_is_what_pylance_writes() -> None:
    # pylance 14 wrote row ids [3, 12] as range_with_bitmap{start 3, end 13, bitmap 01 02}
    # and [7, 25, 26] as {start 7, end 27, bitmap 01 00 0c}: least significant bit first.
    for values, bitmap in (([3, 12], b"\x01\x02"), ([7, 25, 26], b"\x01\x00\x0c")):
        seg = encode_segment(_arr(values))
        assert seg.WhichOneof("segment") == "range_with_bitmap"
        assert seg.range_with_bitmap.bitmap == bitmap
        assert seg.range_with_bitmap.end == values[-1] + 1
    pylance = rowids_pb2.U64Segment()
    pylance.range_with_bitmap.end = 10
    pylance.range_with_bitmap.bitmap = b"\xf7\x03"  # compaction of rows 0..9 minus row 3
    assert decode_segment(pylance).tolist() == [0, 1, 2, 4, 5, 6, 7, 8, 9]


def test_corrupt_sequences_are_refused() -> None:
    with pytest.raises(CorruptFileError):
        decode_row_ids(b"\xff\xff\xff")
    with pytest.raises(CorruptFileError, match="holds 5 ids for 6 rows"):
        decode_row_ids(encode_row_id_bytes(np.arange(5)), 6)
    seg = rowids_pb2.U64Segment()
    seg.range.start, seg.range.end = 10, 5
    with pytest.raises(CorruptFileError):
        segment_length(seg)
    seg = rowids_pb2.U64Segment()
    seg.range_with_bitmap.end = 100
    seg.range_with_bitmap.bitmap = b"\xff"
    with pytest.raises(CorruptFileError, match="too short"):
        decode_segment(seg)
    bad = rowids_pb2.EncodedU64Array()
    bad.u16_array.offsets = b"\x01"
    with pytest.raises(CorruptFileError):
        decode_u64_array(bad)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 6), max_size=200))
def test_version_sequences_round_trip_as_position_runs(values: list[int]) -> None:
    arr = _arr(values)
    data = encode_version_bytes(arr)
    assert np.array_equal(decode_versions(data, len(arr)), arr)
    seq = rowids_pb2.RowDatasetVersionSequence.FromString(data)
    runs = len(arr) and 1 + int(np.count_nonzero(arr[1:] != arr[:-1]))
    assert len(seq.runs) == runs
    pos = 0
    for run in seq.runs:  # spans are the runs' row position ranges, as pylance writes them
        assert run.span.range.start == pos
        pos = run.span.range.end
    assert pos == len(arr)


def test_version_runs_count_values_of_any_segment_kind() -> None:
    # after compaction pylance writes runs whose spans are masked position segments
    seq = rowids_pb2.RowDatasetVersionSequence()
    run = seq.runs.add(version=1)
    run.span.range_with_bitmap.end = 5
    run.span.range_with_bitmap.bitmap = b"\x1d"  # 4 of 5 positions
    run = seq.runs.add(version=3)
    run.span.range.start, run.span.range.end = 1, 3
    assert decode_versions(seq.SerializeToString(), 6).tolist() == [1, 1, 1, 1, 3, 3]
    assert decode_versions(uniform_versions(3, 7)).tolist() == [7, 7, 7]
    with pytest.raises(CorruptFileError, match="covers 6 rows"):
        decode_versions(seq.SerializeToString(), 7)
