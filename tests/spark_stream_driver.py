"""A Spark driver in its own process for tests/test_spark_stream.py: streams a store into the rocketmq-store sink
(Trigger.AvailableNow with maxMessagesPerTrigger), so a test can SIGKILL it mid-run and start it again on the
same checkpoint. Usage: python spark_stream_driver.py SOURCE_STORE SINK_ROOT CHECKPOINT MAX_PER_TRIGGER"""
import os
import sys


def main(source, sink_root, checkpoint, max_per_trigger):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("rmqcore-stream-driver")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.local.dir", os.path.join(checkpoint + "-local"))
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = (spark.readStream.format("rocketmq-store").option("startingOffsets", "earliest")
          .option("maxMessagesPerTrigger", max_per_trigger).load(source)
          .select("topic", "queue_id", "body", "keys"))
    q = (df.writeStream.format("rocketmq-store").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start(sink_root))
    q.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
