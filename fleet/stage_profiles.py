#!/usr/bin/env python3
"""Per-stage profiles of Spark applications across a whole cluster, on Spark.

Reads the samples tables (`samples.parquet`, see the README's contract) that
sparkprof wrote on any number of workers, from any path Spark reads (local,
HDFS, S3: globs welcome), and writes under OUT:

  OUT/folded/app_id=<app>/stage_id=<S>/kind=<kind>/part-*.txt
      the stage's folded stacks summed over every executor of every host
      (Brendan Gregg's format, as sparkprof's own files: `frames count`);
  OUT/summary/  (Parquet; and OUT/summary.json when OUT is local)
      one row per (application, stage, kind): its total, its name and
      attempts from the event log (when given), each executor's share, the
      top leaf frames, and the executors whose time is far above the
      others' (skew).

    spark-submit fleet/stage_profiles.py --output OUT \\
        [--event-log EVENTLOG ...] [--top 20] [--skew 2.0] TABLE [TABLE ...]

A stage is flagged skewed when one executor's weight is more than --skew
times the median of the stage's other executors.
"""

import argparse
import json
import statistics

from pyspark.sql import SparkSession, Window
from pyspark.sql import functions as F


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="+", help="samples.parquet files or directories")
    parser.add_argument("--output", required=True)
    parser.add_argument("--event-log", action="append", default=[],
                        help="a Spark event log (as the History Server reads it)")
    parser.add_argument("--top", type=int, default=20, help="top leaf frames per stage")
    parser.add_argument("--skew", type=float, default=2.0,
                        help="an executor above this many times the others' median is skewed")
    return parser.parse_args()


def stage_names(spark, event_logs):
    """(app_id, stage_id) -> (name, [attempts]) from Spark event logs."""
    names = {}
    for path in event_logs:
        events = spark.read.json(path)
        apps = (events.where(F.col("Event") == "SparkListenerApplicationStart")
                .select(F.col("`App ID`").alias("app_id")).collect())
        if not apps:
            continue
        app_id = apps[0]["app_id"]
        stages = (events.where(F.col("Event").isin(
            "SparkListenerStageSubmitted", "SparkListenerStageCompleted"))
            .select(F.col("`Stage Info`.`Stage ID`").alias("stage"),
                    F.col("`Stage Info`.`Stage Attempt ID`").alias("attempt"),
                    F.col("`Stage Info`.`Stage Name`").alias("name"))
            .distinct().collect())
        for row in stages:
            name, attempts = names.get((app_id, row["stage"]), (row["name"], set()))
            attempts.add(row["attempt"])
            names[(app_id, row["stage"])] = (name, attempts)
    return {key: (name, sorted(attempts)) for key, (name, attempts) in names.items()}


def main():
    args = parse_args()
    spark = SparkSession.builder.appName("sparkprof stage profiles").getOrCreate()
    samples = (spark.read.parquet(*args.tables)
               .where(F.col("app_id").isNotNull() & F.col("stage_id").isNotNull()))
    keys = ["app_id", "stage_id", "kind"]

    # Folded stacks per stage, summed over executors and hosts.
    folded = (samples
              .groupBy(*keys, F.concat_ws(";", "frames").alias("stack"))
              .agg(F.sum("weight").alias("weight"))
              .select(*keys, F.concat_ws(" ", "stack", F.col("weight").cast("string"))
                      .alias("line")))
    (folded.repartition(*keys).write.mode("overwrite")
     .partitionBy(*keys).text(f"{args.output}/folded"))

    # Per stage: total and each executor's weight.
    per_executor = (samples.groupBy(*keys, "unit", "host", "executor_id")
                    .agg(F.sum("weight").alias("weight")))
    totals = per_executor.groupBy(*keys, "unit").agg(F.sum("weight").alias("total"))
    executors = (per_executor.join(totals, keys + ["unit"])
                 .groupBy(*keys)
                 .agg(F.collect_list(F.struct(
                     "host", "executor_id", "weight",
                     (F.col("weight") / F.col("total")).alias("share"))).alias("executors")))
    # Top leaf frames per stage.
    leaves = (samples.groupBy(*keys, F.element_at("frames", -1).alias("frame"))
              .agg(F.sum("weight").alias("weight")))
    ranked = leaves.withColumn(
        "rank", F.row_number().over(Window.partitionBy(*keys).orderBy(F.desc("weight"))))
    top = (ranked.where(F.col("rank") <= args.top).join(totals, keys)
           .groupBy(*keys)
           .agg(F.sort_array(F.collect_list(F.struct(
               F.col("weight"), F.col("frame"),
               (F.col("weight") / F.col("total")).alias("share"))), asc=False)
               .alias("top_frames")))
    summary = totals.join(executors, keys).join(top, keys, "left")

    names = stage_names(spark, args.event_log)
    rows = []
    for row in summary.orderBy(*keys).collect():
        executors = row["executors"]
        skewed = sorted(
            e["executor_id"] or e["host"] for i, e in enumerate(executors)
            if len(executors) >= 2 and e["weight"] > args.skew * statistics.median(
                o["weight"] for j, o in enumerate(executors) if j != i))
        name, attempts = names.get((row["app_id"], row["stage_id"]), (None, []))
        rows.append({
            "app_id": row["app_id"],
            "stage_id": row["stage_id"],
            "stage_name": name,
            "stage_attempts": attempts,
            "kind": row["kind"],
            "unit": row["unit"],
            "total": row["total"],
            "executors": sorted(
                ({"host": e["host"], "executor_id": e["executor_id"],
                  "weight": e["weight"], "share": e["share"]} for e in row["executors"]),
                key=lambda e: -e["weight"]),
            "top_frames": [{"frame": t["frame"], "weight": t["weight"], "share": t["share"]}
                           for t in (row["top_frames"] or [])],
            "skewed_executors": skewed,
            "skew": bool(skewed),
        })
    spark.createDataFrame(rows, schema=(
        "app_id string, stage_id long, stage_name string, stage_attempts array<long>, "
        "kind string, unit string, total long, "
        "executors array<struct<host:string,executor_id:string,weight:long,share:double>>, "
        "top_frames array<struct<frame:string,weight:long,share:double>>, "
        "skewed_executors array<string>, skew boolean")) \
        .write.mode("overwrite").parquet(f"{args.output}/summary")
    if "://" not in args.output:  # a local directory: the summary for a person too
        with open(f"{args.output}/summary.json", "w") as out:
            out.write(json.dumps(rows, indent=2) + "\n")
    for row in rows:
        label = f"stage {row['stage_id']}"
        if row["stage_name"]:
            label += f" ({row['stage_name']}, attempts {row['stage_attempts']})"
        flag = f"  SKEW: {', '.join(row['skewed_executors'])}" if row["skew"] else ""
        print(f"{row['app_id']} {label} {row['kind']}: {row['total']} {row['unit']} "
              f"over {len(row['executors'])} executors{flag}")
    spark.stop()


if __name__ == "__main__":
    main()
