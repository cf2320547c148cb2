"""The fixed, documented schema of the ``rocketmq-store`` data source, in Spark DDL and in Arrow.

Names follow rmqcore's ``MessageExt`` attributes (snake_case), plus provenance: ``broker`` (the store's broker
name) and ``segment`` (the commitlog file name: ``commitlog_offset`` is unique per broker only).

Arrow types are exactly what PySpark 4.x's ``to_arrow_schema(schema, timezone="UTC")`` gives for the Spark
types, because Spark rejects a batch whose Arrow schema differs (SPARK-55583): ``string``/``binary`` (not the
large variants), ``timestamp[us, tz=UTC]``, ``list<element: string>``, ``map<string, string>`` with a non-null
key. Store times are milliseconds on disk and microseconds here. This module imports pyarrow only.
"""
from __future__ import annotations

import pyarrow as pa

#: (name, Spark DDL type, Arrow type, meaning)
COLUMNS = [
    ("broker", "STRING", pa.string(), "broker name of the store the row comes from"),
    ("segment", "STRING", pa.string(), "commitlog file (20-digit name) holding the record"),
    ("topic", "STRING", pa.string(), "topic"),
    ("queue_id", "INT", pa.int32(), "queue id"),
    ("queue_offset", "BIGINT", pa.int64(), "offset in the consume queue"),
    ("commitlog_offset", "BIGINT", pa.int64(), "physical offset stored in the record"),
    ("store_size", "INT", pa.int32(), "record length (totalSize)"),
    ("store_timestamp", "TIMESTAMP", pa.timestamp("us", tz="UTC"), "store time (UTC)"),
    ("born_timestamp", "TIMESTAMP", pa.timestamp("us", tz="UTC"), "born time (UTC)"),
    ("born_host", "STRING", pa.string(), "producer address, 'ip:port' ('[v6]:port')"),
    ("store_host", "STRING", pa.string(), "broker address, 'ip:port' ('[v6]:port')"),
    ("sys_flag", "INT", pa.int32(), "sysFlag bits"),
    ("flag", "INT", pa.int32(), "user flag"),
    ("reconsume_times", "INT", pa.int32(), "reconsume times"),
    ("prepared_transaction_offset", "BIGINT", pa.int64(), "prepared transaction offset"),
    ("body_crc", "INT", pa.int32(), "bodyCRC as stored"),
    ("crc_ok", "BOOLEAN", pa.bool_(), "body CRC (and 5.x __CRC32#) verified; null when checkCrc=false"),
    ("tags", "STRING", pa.string(), "TAGS property, null when absent"),
    ("keys", "ARRAY<STRING>", pa.list_(pa.field("element", pa.string())), "KEYS split on spaces"),
    ("uniq_key", "STRING", pa.string(), "UNIQ_KEY property, null when absent"),
    ("properties", "MAP<STRING,STRING>",
     pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string())), "all properties"),
    ("body", "BINARY", pa.binary(), "message body"),
]

COLUMN_NAMES = [c[0] for c in COLUMNS]
ARROW_TYPES = {c[0]: c[2] for c in COLUMNS}
DDL = ", ".join(f"{name} {ddl}" for name, ddl, _, _ in COLUMNS)



def arrow_schema(fields) -> pa.Schema:
    """The Arrow schema of a batch for ``fields``: (name, nullable) pairs, or a Spark StructType."""
    out = []
    for f in fields:
        name, nullable = (f.name, f.nullable) if hasattr(f, "nullable") else f
        if name not in ARROW_TYPES:
            raise ValueError(f"rocketmq-store has no column {name!r}; columns: {', '.join(COLUMN_NAMES)}")
        out.append(pa.field(name, ARROW_TYPES[name], nullable=nullable))
    return pa.schema(out)


def spark_schema():
    """The full schema as a pyspark StructType (imports pyspark)."""
    from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, IntegerType, LongType, MapType,
                                   StringType, StructField, StructType, TimestampType)
    types = {"STRING": StringType(), "INT": IntegerType(), "BIGINT": LongType(), "TIMESTAMP": TimestampType(),
             "BOOLEAN": BooleanType(), "BINARY": BinaryType(), "ARRAY<STRING>": ArrayType(StringType(), True),
             "MAP<STRING,STRING>": MapType(StringType(), StringType(), True)}
    return StructType([StructField(name, types[ddl], True) for name, ddl, _, _ in COLUMNS])
