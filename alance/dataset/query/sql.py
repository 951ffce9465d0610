"""SQL over a dataset version (pylance's ``LanceDataset.sql``), run by DuckDB.

``ds.sql("SELECT ... FROM dataset WHERE ...").table_name("t").build()`` gives a query whose
results come as record batches (:meth:`SqlQuery.to_batch_records`) or a streaming reader
(:meth:`SqlQuery.to_stream_reader`). The dataset is handed to DuckDB as an Arrow stream of
its rows (read batch by batch as DuckDB pulls them), under the table name given (default
``dataset``). DuckDB is an optional dependency (``pip install duckdb``): without it,
:class:`~alance.errors.UnsupportedFeatureError`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from alance import _loop
from alance.errors import InvalidInputError, UnsupportedFeatureError

if TYPE_CHECKING:
    from alance.dataset.api import LanceDataset

__all__ = ["SqlQuery", "SqlQueryBuilder"]

#: The table name a query uses unless :meth:`SqlQueryBuilder.table_name` sets another.
DEFAULT_TABLE = "dataset"


def _duckdb() -> Any:
    try:
        import duckdb
    except ImportError:
        raise UnsupportedFeatureError("LanceDataset.sql runs on DuckDB: pip install duckdb") \
            from None
    return duckdb


class SqlQueryBuilder:
    """A SQL query over one dataset version, being configured."""

    def __init__(self, dataset: LanceDataset, query: str) -> None:
        if not isinstance(query, str) or not query.strip():
            raise InvalidInputError("sql needs a query")
        self._dataset, self._query, self._table = dataset, query, DEFAULT_TABLE

    def table_name(self, name: str) -> SqlQueryBuilder:
        """The name the query uses for the dataset (default ``dataset``)."""
        if not isinstance(name, str) or not name.isidentifier():
            raise InvalidInputError(f"table name must be an identifier, not {name!r}")
        self._table = name
        return self

    def build(self) -> SqlQuery:
        """The query, ready to run."""
        return SqlQuery(self._dataset, self._query, self._table)


class SqlQuery:
    """A SQL query ready to run (each run reads the dataset again)."""

    def __init__(self, dataset: LanceDataset, query: str, table: str) -> None:
        self._dataset, self._query, self._table = dataset, query, table

    def _rows(self) -> pa.RecordBatchReader:
        """The dataset's rows as a reader DuckDB can pull from any thread."""
        scanner = self._dataset.scanner()
        return pa.RecordBatchReader.from_batches(scanner.output_schema,
                                                 _loop.iterate(scanner.to_batches()))

    def _run(self) -> pa.RecordBatchReader:
        duckdb = _duckdb()
        connection = duckdb.connect()
        try:
            connection.register(self._table, self._rows())
            relation = connection.sql(self._query)
            if relation is None:
                raise InvalidInputError("sql takes a query that returns rows (SELECT ...)")
            fetch = (getattr(relation, "to_arrow_reader", None)
                     or relation.fetch_record_batch)  # DuckDB 2 / 1.x names
            result = fetch()
            return pa.RecordBatchReader.from_batches(result.schema, _closing(result,
                                                                            connection))
        except duckdb.Error as exc:
            connection.close()
            raise InvalidInputError(f"SQL query failed: {exc}") from exc
        except BaseException:
            connection.close()
            raise

    async def to_batch_records(self) -> list[pa.RecordBatch]:
        """Every result batch (the query runs on a worker thread)."""
        return await asyncio.to_thread(lambda: list(self._run()))

    def to_stream_reader(self) -> pa.RecordBatchReader:
        """The results as a streaming reader (blocking; call from a thread, not from the
        event loop)."""
        return self._run()


def _closing(reader: pa.RecordBatchReader, connection: Any) -> Any:
    try:
        yield from reader
    finally:
        connection.close()
