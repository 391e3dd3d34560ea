"""The ``topiclake`` Python data source: Spark's Kafka source and sink, over a topiclake warehouse.

``spark.read``/``spark.readStream.format("topiclake")`` read topics with the Kafka source's schema and
options (:mod:`topiclake.spark.source`); ``df.write``/``writeStream.format("topiclake")`` append to topics
(:mod:`topiclake.spark.sink`).

Spark hands a Python data source its options and nothing else (it is built in a Python worker without a
Spark session), so the session's ``spark.topiclake.warehouse`` is read by :func:`topiclake.spark.register`
on the driver and baked into the registered class (:meth:`TopiclakeDataSource.configured`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from pyspark.sql.datasource import CaseInsensitiveDict, DataSource
from pyspark.sql.types import StructType

from topiclake.spark._options import parse_bool, parse_options
from topiclake.spark._schema import kafka_schema

if TYPE_CHECKING:
    from pyspark.sql.datasource import (
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )

#: The format name: ``spark.read.format("topiclake")``.
NAME = "topiclake"

__all__ = ["NAME", "TopiclakeDataSource", "kafka_schema"]


class TopiclakeDataSource(DataSource):
    """The ``topiclake`` format (see the module docstring and docs/spark.md)."""

    #: The warehouse used when a read or write has no ``warehouse`` option (set by :meth:`configured`).
    default_warehouse: ClassVar[str | None] = None

    @classmethod
    def name(cls) -> str:
        """The format name, ``topiclake``."""
        return NAME

    @classmethod
    def configured(cls, warehouse: str | None) -> type[TopiclakeDataSource]:
        """This class, or a subclass whose default warehouse is ``warehouse``.

        The subclass is made at run time, so Spark pickles it by value with the default inside; that is
        how the driver's session conf reaches the workers that build the source.
        """
        if warehouse is None:
            return cls
        return type(
            "ConfiguredTopiclakeDataSource",
            (cls,),
            {"default_warehouse": warehouse, "__doc__": cls.__doc__, "__module__": __name__},
        )

    def resolved_options(self) -> CaseInsensitiveDict:
        """The options, with ``warehouse`` filled in from the session's default when missing."""
        options = CaseInsensitiveDict(dict(self.options))
        if "warehouse" not in options and self.default_warehouse is not None:
            options["warehouse"] = self.default_warehouse
        return options

    def schema(self) -> StructType:
        """Kafka's source schema; with ``includeHeaders=true`` the ``headers`` column too.

        Spark asks for it for writes too, so read options are checked when a reader is made, not here.
        """
        return kafka_schema(parse_bool(self.options, "includeHeaders", False))

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (``spark.read``); ``startingOffsets`` earliest and ``endingOffsets`` latest by
        default."""
        from topiclake.spark.source import TopiclakeBatchReader, check_user_schema

        options = parse_options(self.options, streaming=False, default_warehouse=self.default_warehouse)
        check_user_schema(schema, options.include_headers)
        return TopiclakeBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream reader (``spark.readStream``)."""
        from topiclake.spark.source import TopiclakeStreamReader, check_user_schema

        options = parse_options(self.options, streaming=True, default_warehouse=self.default_warehouse)
        check_user_schema(schema, options.include_headers)
        return TopiclakeStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer (``df.write``), see :mod:`topiclake.spark.sink`."""
        from topiclake.spark.sink import TopiclakeWriter

        return TopiclakeWriter(self.resolved_options(), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A stream writer (``writeStream``), see :mod:`topiclake.spark.sink`."""
        from topiclake.spark.sink import TopiclakeStreamWriter

        return TopiclakeStreamWriter(self.resolved_options(), schema, overwrite)
