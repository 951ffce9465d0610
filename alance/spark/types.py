"""Lance (Arrow) types <-> Spark SQL types, as the ``alance`` data source maps them.

Reading: every column of the dataset gets the Spark type below; batches are cast to the Arrow
form Spark expects for that type (:func:`spark_arrow_schema`). Casts never lose data: a value
that does not fit (a nanosecond timestamp with sub-microsecond digits) fails the read rather
than being rounded. Types Spark has no counterpart for are widened when that is exact, and
refused with :class:`~alance.errors.UnsupportedFeatureError` otherwise (leave such columns out
with the ``columns`` option).

============================================  ===========================================
Lance / Arrow                                 Spark
============================================  ===========================================
bool                                          BooleanType
int8 / int16 / int32 / int64                  ByteType / ShortType / IntegerType / LongType
uint8 / uint16 / uint32                       ShortType / IntegerType / LongType (widened)
uint64                                        DecimalType(20, 0) (widened)
float16 / float32                             FloatType (float16 widened)
float64                                       DoubleType
decimal128(p, s), decimal256(p <= 38, s)      DecimalType(p, s)
string / large_string                         StringType
binary / large_binary / fixed_size_binary     BinaryType
date32 / date64                               DateType
timestamp(unit, tz)                           TimestampType (microseconds)
timestamp(unit) without time zone             TimestampNTZType (microseconds)
time32 / time64                               TimeType(6)
duration(unit)                                DayTimeIntervalType (microseconds)
list / large_list / fixed_size_list (vector)  ArrayType
struct                                        StructType
map                                           MapType
dictionary(index, value)                      the value type (decoded)
null                                          NullType
============================================  ===========================================

System columns (``_rowid``, ``_rowaddr``, ``_row_created_at_version``,
``_row_last_updated_at_version``; uint64 in alance) are read as LongType: their values stay far
below 2**63 (a value that did not fit would fail the read, never wrap).

Refused: decimal256 with precision above 38, extension types (e.g. ``lance.bfloat16``), and
anything else not listed. Writing goes the other way through Spark's own Arrow forms; when
appending, values are cast to the dataset's column types without loss (an ``int`` column of
Spark appends to a ``uint32`` column as long as no value is negative).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from alance.dataset.query.row_ids import SYSTEM_COLUMNS
from alance.errors import UnsupportedFeatureError

#: Arrow field metadata key naming an extension type.
_EXTENSION_KEY = b"ARROW:extension:name"
#: Extension names whose storage is exactly what users expect to read (no conversion needed).
_TRANSPARENT_EXTENSIONS: frozenset[bytes] = frozenset()


def spark_type(dtype: pa.DataType, where: str = "") -> T.DataType:
    """The Spark type a column of Arrow type ``dtype`` is read as (see the module table)."""
    t = pa.types
    if isinstance(dtype, pa.BaseExtensionType):
        raise UnsupportedFeatureError(f"column {where!r}: extension type "
                                      f"{dtype.extension_name} has no Spark counterpart")
    if t.is_dictionary(dtype):
        return spark_type(dtype.value_type, where)
    simple: list[tuple[object, T.DataType]] = [
        (t.is_boolean, T.BooleanType()), (t.is_int8, T.ByteType()), (t.is_int16, T.ShortType()),
        (t.is_int32, T.IntegerType()), (t.is_int64, T.LongType()),
        (t.is_uint8, T.ShortType()), (t.is_uint16, T.IntegerType()),
        (t.is_uint32, T.LongType()), (t.is_uint64, T.DecimalType(20, 0)),
        (t.is_float16, T.FloatType()), (t.is_float32, T.FloatType()),
        (t.is_float64, T.DoubleType()),
        (lambda d: t.is_string(d) or t.is_large_string(d), T.StringType()),
        (lambda d: t.is_binary(d) or t.is_large_binary(d) or t.is_fixed_size_binary(d),
         T.BinaryType()),
        (t.is_date, T.DateType()), (t.is_time, T.TimeType(6)),
        (t.is_duration, T.DayTimeIntervalType()), (t.is_null, T.NullType()),
    ]
    for test, result in simple:
        if test(dtype):  # type: ignore[operator]
            return result
    if t.is_timestamp(dtype):
        return T.TimestampType() if dtype.tz else T.TimestampNTZType()
    if t.is_decimal(dtype):
        if dtype.precision > 38:
            raise UnsupportedFeatureError(f"column {where!r}: {dtype} exceeds Spark's "
                                          "largest decimal precision (38)")
        return T.DecimalType(dtype.precision, dtype.scale)
    if t.is_list(dtype) or t.is_large_list(dtype) or t.is_fixed_size_list(dtype):
        item = dtype.value_field
        return T.ArrayType(spark_type(item.type, f"{where}.{item.name}"), item.nullable)
    if t.is_map(dtype):
        return T.MapType(spark_type(dtype.key_type, f"{where}.key"),
                         spark_type(dtype.item_type, f"{where}.value"),
                         dtype.item_field.nullable)
    if t.is_struct(dtype):
        return T.StructType([spark_field(dtype.field(i), f"{where}.")
                             for i in range(dtype.num_fields)])
    raise UnsupportedFeatureError(f"column {where!r}: Arrow type {dtype} has no Spark "
                                  "counterpart")


def spark_field(field: pa.Field, prefix: str = "") -> T.StructField:
    """The Spark field for an Arrow field of a dataset schema."""
    where = prefix + field.name
    if not prefix and field.name in SYSTEM_COLUMNS and pa.types.is_unsigned_integer(field.type):
        return T.StructField(field.name, T.LongType(), field.nullable)
    meta = field.metadata or {}
    if _EXTENSION_KEY in meta and meta[_EXTENSION_KEY] not in _TRANSPARENT_EXTENSIONS:
        raise UnsupportedFeatureError(
            f"column {where!r}: extension type {meta[_EXTENSION_KEY].decode()} has no Spark "
            "counterpart (leave it out with the 'columns' option)")
    return T.StructField(field.name, spark_type(field.type, where), field.nullable)


def spark_schema(schema: pa.Schema) -> T.StructType:
    """The Spark schema a dataset with Arrow schema ``schema`` is read with."""
    return T.StructType([spark_field(f) for f in schema])


def spark_arrow_schema(schema: T.StructType) -> pa.Schema:
    """The exact Arrow schema Spark expects batches of a ``schema`` read to have."""
    return to_arrow_schema(schema, timezone="UTC")


def to_spark_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` (dataset types) cast to ``target`` (Spark's Arrow forms), without loss."""
    if batch.schema.equals(target):
        return batch
    columns = []
    for f, col in zip(target, batch.columns, strict=True):
        if isinstance(col.type, pa.BaseExtensionType):
            col = col.storage
        if not col.type.equals(f.type):
            try:
                col = col.cast(f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise UnsupportedFeatureError(
                    f"column {f.name!r}: cannot convert {col.type} to Spark's {f.type}: "
                    f"{exc}") from exc
        columns.append(col)
    return pa.RecordBatch.from_arrays(columns, schema=target)
