"""rmqcore on Apache Spark (``pip install rmqcore[spark]``): the ``rocketmq-store`` data source and jobs.

```python
from rmqcore.spark import register
register(spark)            # or nothing at all when the top-level pyspark_rmqcore module is installed
df = (spark.read.format("rocketmq-store")
      .option("brokers", '{"broker-a": "/data/a/store", "broker-b": "/data/b/store"}')
      .option("topics", "orders").load())
s3 = spark.read.format("rocketmq-store").load("s3://bucket/stores/broker-c")   # any pyarrow.fs filesystem
live = spark.read.format("rocketmq-store").option("onLiveStore", "snapshot").load("/data/a/store")
df.write.format("rocketmq-store").mode("overwrite").save("/data/restored")   # or append
write_stores(df, "/data/restored")     # every save mode, the default (errorifexists) too
stream = spark.readStream.format("rocketmq-store").option("startingOffsets", "earliest").load("/data/a/store")
stream.writeStream.format("rocketmq-store").option("checkpointLocation", "/ck").start("/data/copy")  # stream.py, sink.py

from rmqcore.spark import verify, stats, export, rebuild, write_stores
report = verify(spark, {"broker-a": "/data/a/store"})
```

A segment is read by several tasks (``splitSize``, 128 MiB by default); a store held open by a broker is refused
unless read as a snapshot (``onLiveStore=snapshot``). The Spark-free parts (``rmqcore.spark.arrow``: segment → Arrow batches; ``rmqcore.spark.schema``) need pyarrow
only; the rest needs pyspark >= 4.0. The core package imports neither.
"""
from __future__ import annotations

__all__ = ["register", "session", "RocketMQStoreDataSource", "RocketMQStorePushdownDataSource", "DefaultSource",
           "FORMAT", "PUSHDOWN_FORMAT", "verify", "stats", "export", "rebuild", "rebuild_store", "read_stores",
           "write_stores",
           "COLUMN_NAMES", "DDL", "iter_segment_batches", "SegmentRead", "CorruptSegmentError"]

_LAZY = {
    "RocketMQStoreDataSource": "source", "RocketMQStorePushdownDataSource": "source", "FORMAT": "source",
    "PUSHDOWN_FORMAT": "source", "verify": "jobs", "stats": "jobs", "export": "jobs", "rebuild": "jobs",
    "rebuild_store": "jobs", "read_stores": "jobs", "write_stores": "jobs", "COLUMN_NAMES": "schema", "DDL": "schema",
    "iter_segment_batches": "arrow", "SegmentRead": "arrow", "CorruptSegmentError": "arrow",
}


def __getattr__(name):
    # Lazy, so ``rmqcore.spark.arrow``/``.schema`` work with pyarrow alone (no pyspark import).
    if name == "DefaultSource":
        from .source import RocketMQStoreDataSource
        return RocketMQStoreDataSource
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'rmqcore.spark' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(f".{mod}", __name__), name)


def register(spark, pushdown: bool = False) -> None:
    """Register ``rocketmq-store`` on ``spark``. ``pushdown=True`` also registers ``rocketmq-store-pushdown``
    (the reader with pushFilters) and turns on ``spark.sql.python.filterPushdown.enabled``, which Spark needs
    for any reader that has pushFilters."""
    from .source import FORMAT, RocketMQStoreDataSource, RocketMQStorePushdownDataSource
    # Installed, the top-level pyspark_rmqcore module registers the format statically; registering it again
    # would make Spark warn "replaced a statically registered data source" on every job.
    if not _statically_registered(spark, FORMAT):
        spark.dataSource.register(RocketMQStoreDataSource)
    if pushdown:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
        spark.dataSource.register(RocketMQStorePushdownDataSource)


def _statically_registered(spark, name: str) -> bool:
    """Does Spark already know data source ``name`` (PySpark's own lookup of the pyspark_* modules the workers'
    interpreter can import)? False when that cannot be asked (a Spark Connect session has no JVM here)."""
    try:
        return bool(spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(name))
    except Exception:
        return False


def session(master: str = "local[*]", app_name: str = "rmqcore", conf: dict | None = None):
    """A SparkSession set up for rmqcore jobs: Python workers on this interpreter (which has rmqcore and
    pyarrow; PySpark would otherwise start plain ``python3``), loopback addresses for local masters, the data
    source registered."""
    import os
    import sys

    from pyspark.sql import SparkSession
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # hideTraceback: a data source's error (no such store, a live store) reaches the driver as its one line
    # instead of a Python worker's traceback.
    b = (SparkSession.builder.master(master).appName(app_name).config("spark.ui.enabled", "false")
         .config("spark.sql.execution.pyspark.udf.hideTraceback.enabled", "true"))
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    register(spark)
    return spark
