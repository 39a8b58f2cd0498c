"""A short multi-stage PySpark application for sparkprof's end-to-end test.

Usage: spark_job.py MASTER_URL EVENT_LOG_DIR ROUNDS ROWS

Two executors with one core each (standalone: spark.cores.max=2,
spark.executor.cores=1), executor JVMs as Spark runs them by default
(without -XX:+PreserveFramePointer: sparkprof walks their Java frames
itself), and the event log written as plain JSON lines into EVENT_LOG_DIR. Each round runs
a join + groupBy (JVM-only stages), a pure-Python UDF (run by pyspark
workers forked from each executor's pyspark.daemon) and an RDD with Python
lambdas. The first stage is a single task, so one executor never runs it.
"""

import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

master, event_dir, rounds, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

spark = (
    SparkSession.builder.master(master)
    .appName("sparkprof-e2e")
    .config("spark.executor.cores", "1")
    .config("spark.cores.max", "2")
    .config("spark.executor.memory", "1g")
    # Start work only once both executors are up, so both run tasks.
    .config("spark.scheduler.minRegisteredResourcesRatio", "1.0")
    .config("spark.scheduler.maxRegisteredResourcesWaitingTime", "120s")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", "file://" + event_dir)
    .config("spark.eventLog.compress", "false")
    .config("spark.eventLog.rolling.enabled", "false")
    .config("spark.sql.shuffle.partitions", "8")
    .config("spark.sql.adaptive.enabled", "false")
    .config("spark.ui.enabled", "false")
    .config("spark.ui.showConsoleProgress", "false")
    .getOrCreate()
)
sc = spark.sparkContext
print("APP_ID", sc.applicationId, flush=True)


@F.udf(returnType=LongType())
def py_hash(x):
    # CPU-heavy pure Python: keeps the pyspark workers on-CPU.
    h = x
    for _ in range(200):
        h = (h * 1103515245 + 12345) & 0x7FFFFFFF
    return h % 1000


t0 = time.time()
# A one-task stage: only one of the two executors runs it.
single = sc.parallelize(range(200_000), 1).map(lambda x: x * 3).sum()
for r in range(rounds):
    a = (
        spark.range(0, rows)
        .withColumn("k", (F.col("id") * 7919) % 50000)
        .withColumn("v", F.rand(seed=r) * 100)
    )
    b = (
        spark.range(0, 50000)
        .withColumnRenamed("id", "k")
        .withColumn("name", F.concat(F.lit("n"), F.col("k").cast("string")))
    )
    joined = a.join(b, "k").groupBy("name").agg(F.sum("v").alias("s"), F.count("*").alias("c"))
    top = joined.orderBy(F.desc("s")).limit(5).collect()
    udf_groups = (
        spark.range(0, rows // 10, numPartitions=8)
        .withColumn("h", py_hash(F.col("id")))
        .groupBy("h")
        .count()
        .count()
    )
    rdd_keys = (
        sc.parallelize(range(rows // 10), 8)
        .map(lambda x: (x % 97, x * x))
        .reduceByKey(lambda p, q: p + q)
        .count()
    )
    print(
        f"round {r}: top={top[0]['name']} udf_groups={udf_groups} rdd_keys={rdd_keys} "
        f"t={time.time() - t0:.1f}s",
        flush=True,
    )

print("TOTAL", round(time.time() - t0, 1), "s", flush=True)
spark.stop()
