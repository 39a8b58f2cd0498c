//! The samples table, `samples.parquet`: one row per distinct (stack,
//! thread, file) of a recording, for Spark and any Parquet reader. Made
//! from the same folded text as the files, so its weights add up to theirs.
//!
//! The schema is a contract (README, "samples.parquet"): fields may be
//! added, never renamed.
//!
//! | column | type | |
//! |---|---|---|
//! | `host` | string | the host recorded |
//! | `start`, `end` | timestamp (µs, UTC) | the file's first and last sample |
//! | `kind` | string | `cpu`, `offcpu`, `wall` |
//! | `unit` | string | what `weight` counts: `samples` or `microseconds` |
//! | `app_id`, `executor_id` | string, null outside Spark | |
//! | `stage_id` | int64, null outside stages | |
//! | `pid` | int64, null for summed short-lived processes and kernel threads | |
//! | `process`, `role` | string | |
//! | `thread` | string | the line's thread frame |
//! | `frames` | list of string | root first, exactly the folded line's frames |
//! | `weight` | int64 | the line's count |

use std::{sync::Arc, time::UNIX_EPOCH};

use arrow_array::{
    ArrayRef, RecordBatch,
    builder::{Int64Builder, ListBuilder, StringBuilder, TimestampMicrosecondBuilder},
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::{
    arrow::ArrowWriter,
    basic::{Compression, ZstdLevel},
    file::properties::WriterProperties,
};

use super::labels::{self, FileLabels};

/// The table's file name in a recording.
pub const SAMPLES_TABLE: &str = "samples.parquet";

/// The schema (see the module's table).
pub fn schema() -> Schema {
    let timestamp = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let string = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
    Schema::new(vec![
        string("host", false),
        Field::new("start", timestamp.clone(), true),
        Field::new("end", timestamp, true),
        string("kind", false),
        string("unit", false),
        string("app_id", true),
        string("executor_id", true),
        Field::new("stage_id", DataType::Int64, true),
        Field::new("pid", DataType::Int64, true),
        string("process", true),
        string("role", false),
        string("thread", true),
        Field::new(
            "frames",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            false,
        ),
        Field::new("weight", DataType::Int64, false),
    ])
}

/// Rows being gathered.
pub struct SamplesTable {
    host: StringBuilder,
    start: TimestampMicrosecondBuilder,
    end: TimestampMicrosecondBuilder,
    kind: StringBuilder,
    unit: StringBuilder,
    app_id: StringBuilder,
    executor_id: StringBuilder,
    stage_id: Int64Builder,
    pid: Int64Builder,
    process: StringBuilder,
    role: StringBuilder,
    thread: StringBuilder,
    frames: ListBuilder<StringBuilder>,
    weight: Int64Builder,
    rows: usize,
}

impl Default for SamplesTable {
    fn default() -> Self {
        let utc = |b: TimestampMicrosecondBuilder| b.with_timezone("UTC");
        Self {
            host: StringBuilder::new(),
            start: utc(TimestampMicrosecondBuilder::new()),
            end: utc(TimestampMicrosecondBuilder::new()),
            kind: StringBuilder::new(),
            unit: StringBuilder::new(),
            app_id: StringBuilder::new(),
            executor_id: StringBuilder::new(),
            stage_id: Int64Builder::new(),
            pid: Int64Builder::new(),
            process: StringBuilder::new(),
            role: StringBuilder::new(),
            thread: StringBuilder::new(),
            frames: ListBuilder::new(StringBuilder::new()),
            weight: Int64Builder::new(),
            rows: 0,
        }
    }
}

fn micros(time: Option<std::time::SystemTime>) -> Option<i64> {
    time.and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_micros() as i64)
}

impl SamplesTable {
    /// Adds a row per (stack, count) line of a folded file.
    pub fn add<S: AsRef<str>>(
        &mut self,
        file: &FileLabels,
        lines: impl IntoIterator<Item = (S, u64)>,
    ) {
        for (stack, count) in lines {
            let frames = labels::frames(stack.as_ref());
            self.host.append_value(&file.host);
            self.start.append_option(micros(file.start));
            self.end.append_option(micros(file.end));
            self.kind.append_value(&file.kind);
            self.unit.append_value(&file.unit);
            self.app_id.append_option(file.app_id.as_deref());
            self.executor_id.append_option(file.executor_id.as_deref());
            self.stage_id.append_option(file.stage_id.map(|s| s as i64));
            self.pid.append_option(file.pid.map(i64::from));
            self.process.append_option(file.process.as_deref());
            self.role.append_value(&file.role);
            self.thread.append_option(labels::thread(&frames));
            for frame in &frames {
                self.frames.values().append_value(frame);
            }
            self.frames.append(true);
            self.weight.append_value(count as i64);
            self.rows += 1;
        }
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The table as a Parquet file (zstd-compressed), emptying it.
    pub fn to_parquet(&mut self) -> Result<Vec<u8>, parquet::errors::ParquetError> {
        let schema = Arc::new(schema());
        let columns: Vec<ArrayRef> = vec![
            Arc::new(self.host.finish()),
            Arc::new(self.start.finish()),
            Arc::new(self.end.finish()),
            Arc::new(self.kind.finish()),
            Arc::new(self.unit.finish()),
            Arc::new(self.app_id.finish()),
            Arc::new(self.executor_id.finish()),
            Arc::new(self.stage_id.finish()),
            Arc::new(self.pid.finish()),
            Arc::new(self.process.finish()),
            Arc::new(self.role.finish()),
            Arc::new(self.thread.finish()),
            Arc::new(self.frames.finish()),
            Arc::new(self.weight.finish()),
        ];
        self.rows = 0;
        let batch = RecordBatch::try_new(schema.clone(), columns)?;
        let properties = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .build();
        let mut bytes = Vec::new();
        let mut writer = ArrowWriter::try_new(&mut bytes, schema, Some(properties))?;
        writer.write(&batch)?;
        writer.close()?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Array, Int64Array, ListArray, StringArray, cast::AsArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    #[test]
    fn rows_are_the_folded_lines() {
        let file = FileLabels {
            host: "worker-1".into(),
            kind: "cpu".into(),
            unit: "samples".into(),
            start: Some(UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000)),
            end: None,
            pid: Some(42),
            process: Some("java".into()),
            role: "executor".into(),
            app_id: Some("app-1".into()),
            executor_id: Some("3".into()),
            stage_id: None,
            sample_period_ns: 10_101_010,
        };
        let mut table = SamplesTable::default();
        table.add(&file, [("java [42];main;a;b", 5), ("java [42];GC;gc", 2)]);
        assert_eq!(table.rows(), 2);
        let bytes = bytes::Bytes::from(table.to_parquet().unwrap());
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        let batch = reader.into_iter().next().unwrap().unwrap();
        assert_eq!(batch.schema().fields().len(), schema().fields().len());
        let weight: &Int64Array = batch.column_by_name("weight").unwrap().as_primitive();
        assert_eq!(weight.values(), &[5, 2]);
        let frames: &ListArray = batch.column_by_name("frames").unwrap().as_list();
        let first = frames.value(0);
        let first: &StringArray = first.as_string();
        assert_eq!(
            first.iter().flatten().collect::<Vec<_>>(),
            ["java [42]", "main", "a", "b"]
        );
        let thread: &StringArray = batch.column_by_name("thread").unwrap().as_string();
        assert_eq!(thread.value(1), "GC");
        assert!(batch.column_by_name("stage_id").unwrap().is_null(0));
    }
}
