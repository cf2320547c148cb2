"""Zero-configuration registration of the ``rocketmq-store`` format.

PySpark registers, on the first data source call, every *top-level* module named ``pyspark_*`` that exposes a
``DefaultSource`` (``pyspark/sql/worker/lookup_data_sources.py`` walks ``pkgutil.iter_modules()``). A module
inside the ``rmqcore`` package is not top-level, so the distribution must also install this file as the
top-level module ``pyspark_rmqcore`` (``[tool.setuptools] py-modules``). Its whole content is the import below.
"""
from rmqcore.spark.source import RocketMQStoreDataSource as DefaultSource  # noqa: F401
