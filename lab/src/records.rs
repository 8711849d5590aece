//! The records file of `eval --records`: the summary and every run's record, with the settings that made them and
//! whether the evaluation had finished. It is rewritten as the evaluation goes, so a run that is stopped keeps what
//! it measured, and `eval --resume` reads it back to skip the runs it holds.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::{EvalRecord, EvalTable, ModeSummary};

/// Why a records file cannot be resumed from.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The file cannot be read.
    #[error("reading the records {path}: {message}")]
    Read { path: String, message: String },
    /// The file is not a records file.
    #[error("{path} is not a records file of `clipsculpt eval` ({message}); choose another --records file")]
    Invalid { path: String, message: String },
    /// The file was written with other settings.
    #[error(
        "the records in {path} were made with other settings ({what} differ); run with the same command, or choose \
         another --records file"
    )]
    OtherSettings { path: String, what: String },
}

/// The file's JSON as written.
#[derive(Serialize)]
struct Written<'a> {
    complete: bool,
    settings: &'a Value,
    summary: BTreeMap<String, ModeSummary>,
    records: &'a [EvalRecord],
}

/// The file's JSON as read back (the summary is recomputed from the records).
#[derive(Deserialize)]
struct Read {
    complete: bool,
    settings: Value,
    records: Vec<EvalRecord>,
}

/// `table` as pretty JSON, with the `settings` that made it; `complete` is false while the evaluation runs.
pub fn to_json(table: &EvalTable, settings: &Value, complete: bool) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&Written {
        complete,
        settings,
        summary: table.summary(),
        records: &table.records,
    })
}

/// The records of `path`, made with `settings`, and whether that evaluation had finished; `None` when there is no
/// file yet.
pub fn resume_from(
    path: &Path,
    settings: &Value,
) -> Result<Option<(EvalTable, bool)>, RecordsError> {
    let name = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(RecordsError::Read {
                path: name,
                message: e.to_string(),
            })
        }
    };
    let read: Read = serde_json::from_str(&text).map_err(|e| RecordsError::Invalid {
        path: name.clone(),
        message: e.to_string(),
    })?;
    let differ = differing_keys(&read.settings, settings);
    if !differ.is_empty() {
        return Err(RecordsError::OtherSettings {
            path: name,
            what: differ.join(", "),
        });
    }
    let table = EvalTable {
        records: read.records,
    };
    Ok(Some((table, read.complete)))
}

/// The top-level keys whose values differ between two settings objects (`settings` when they are not objects).
fn differing_keys(a: &Value, b: &Value) -> Vec<String> {
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .cloned()
                .collect()
        }
        _ if a == b => Vec::new(),
        _ => vec!["settings".to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_written_file_resumes_only_with_the_same_settings() -> anyhow::Result<()> {
        let d = tempfile::tempdir()?;
        let path = d.path().join("records.json");
        assert!(
            resume_from(&path, &json!({}))?.is_none(),
            "no file, nothing to resume"
        );
        let settings = json!({"seeds": [0, 1], "modes": ["prior"]});
        std::fs::write(&path, to_json(&EvalTable::default(), &settings, false)?)?;
        let (table, complete) = resume_from(&path, &settings)?.expect("the file is there");
        assert!(table.records.is_empty() && !complete);
        let other = json!({"seeds": [0, 1, 2], "modes": ["prior"]});
        let e = resume_from(&path, &other).expect_err("other seeds");
        assert!(e.to_string().contains("(seeds differ)"), "{e}");
        std::fs::write(&path, "{\"records\": 3}")?;
        let e = resume_from(&path, &settings).expect_err("not a records file");
        assert!(e.to_string().contains("is not a records file"), "{e}");
        Ok(())
    }
}
