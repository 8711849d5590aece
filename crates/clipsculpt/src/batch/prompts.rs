//! Prompt files: one prompt per line (`#` comments and blank lines ignored), or JSONL with
//! per-item `prompt`, `seed`, `steps`, `name`. A bad line is reported with its number and the
//! others still run.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// One prompt of a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptItem {
    /// 1-based line number in the file.
    pub(crate) line: usize,
    /// The prompt text.
    pub prompt: String,
    /// Per-item seed (else the batch's).
    pub seed: Option<u64>,
    /// Per-item optimization steps (else the batch's).
    pub steps: Option<usize>,
    /// Output name (else derived from the prompt).
    pub(crate) name: Option<String>,
}

impl PromptItem {
    /// The item's stable id: its output folder name and manifest key (`name`, else slug + line).
    pub fn id(&self, seed: u64) -> String {
        match &self.name {
            Some(n) => slug(n),
            None => format!(
                "{:04}-{}-{}",
                self.line,
                slug(&self.prompt),
                self.seed.unwrap_or(seed)
            ),
        }
    }
}

/// A parsed prompt file: the good items and the bad lines.
#[derive(Debug, Default)]
pub struct PromptFile {
    /// Items in file order.
    pub items: Vec<PromptItem>,
    /// Lines that could not be read, with the reason.
    pub errors: Vec<BatchError>,
}

/// Errors of batch inputs and bookkeeping.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The prompt file cannot be read.
    #[error("cannot read prompt file {path}: {source}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The prompt file is not UTF-8.
    #[error("prompt file {path} is not UTF-8 text (first bad byte at offset {offset}); save it as UTF-8")]
    NotUtf8 {
        /// The file.
        path: PathBuf,
        /// Byte offset of the first invalid sequence.
        offset: usize,
    },
    /// One line is unusable.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The file holds no prompt at all.
    #[error("prompt file {path} holds no prompts (only blank lines and # comments)")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The manifest cannot be read or written.
    #[error("manifest {path}: {message}")]
    Manifest {
        /// The manifest file.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },
    /// The batch folder cannot be written.
    #[error("{path}: {message}")]
    Folder {
        /// The file or folder.
        path: PathBuf,
        /// What went wrong and what to do.
        message: String,
    },
    /// Another process runs the same shard of the same batch.
    #[error(transparent)]
    Busy(#[from] crate::atomic::LockError),
    /// A bad `--shard` value or shard environment.
    #[error("{0}")]
    Shard(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonItem {
    prompt: String,
    seed: Option<u64>,
    steps: Option<usize>,
    name: Option<String>,
}

/// Longest prompt accepted, in characters (CLIP sees 77 tokens; longer text is refused early).
pub(crate) const MAX_PROMPT_CHARS: usize = 1000;

/// Reads a prompt file. JSONL is recognised by a `.jsonl` extension or a first item line that
/// starts with `{`.
pub fn parse_prompt_file(path: &Path) -> Result<PromptFile, BatchError> {
    let bytes = std::fs::read(path).map_err(|source| BatchError::Unreadable {
        path: path.to_path_buf(),
        source,
    })?;
    parse_prompt_bytes(path, bytes)
}

/// Parses the contents of the prompt file `path` (the name decides JSONL and names the file in
/// errors).
pub fn parse_prompt_bytes(path: &Path, bytes: Vec<u8>) -> Result<PromptFile, BatchError> {
    let text = String::from_utf8(bytes).map_err(|e| BatchError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to(),
    })?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let jsonl = path.extension().is_some_and(|e| e == "jsonl")
        || lines.first().is_some_and(|(_, l)| l.starts_with('{'));
    let mut out = PromptFile::default();
    for (line, l) in lines {
        let bad = |message: String| BatchError::Line {
            path: path.to_path_buf(),
            line,
            message,
        };
        let item = if jsonl {
            match serde_json::from_str::<JsonItem>(l) {
                Ok(j) => PromptItem {
                    line,
                    prompt: j.prompt,
                    seed: j.seed,
                    steps: j.steps,
                    name: j.name,
                },
                Err(e) => {
                    out.errors.push(bad(format!(
                        "not a JSON object with prompt/seed/steps/name: {e}"
                    )));
                    continue;
                }
            }
        } else {
            PromptItem {
                line,
                prompt: l.to_string(),
                seed: None,
                steps: None,
                name: None,
            }
        };
        match check_prompt(&item.prompt) {
            Ok(()) => out.items.push(item),
            Err(m) => out.errors.push(bad(m)),
        }
    }
    if out.items.is_empty() && out.errors.is_empty() {
        return Err(BatchError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(out)
}

/// Checks a prompt before any work: non-empty, not over-long, no control characters.
pub fn check_prompt(prompt: &str) -> Result<(), String> {
    let p = prompt.trim();
    if p.is_empty() {
        return Err("empty prompt: give a short description such as \"a red cube\"".into());
    }
    let n = p.chars().count();
    if n > MAX_PROMPT_CHARS {
        return Err(format!("prompt of {n} characters is too long (at most {MAX_PROMPT_CHARS}); CLIP reads only 77 tokens"));
    }
    if p.chars().any(|c| c.is_control()) {
        return Err("prompt contains control characters".into());
    }
    Ok(())
}

/// A file-name-safe slug of a text: lowercase ASCII alphanumerics joined by `-`, at most 48 chars.
pub fn slug(text: &str) -> String {
    let mut s = String::new();
    for c in text.chars().flat_map(|c| c.to_lowercase()) {
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
        if s.len() >= 48 {
            break;
        }
    }
    let s = s.trim_end_matches('-').to_string();
    if s.is_empty() {
        "prompt".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, content: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    #[test]
    fn text_file_skips_comments_and_blanks() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "p.txt",
            b"# objects\na red cube\n\n  a blue sphere  \n",
        );
        let f = parse_prompt_file(&p).unwrap();
        let got: Vec<(usize, &str)> = f
            .items
            .iter()
            .map(|i| (i.line, i.prompt.as_str()))
            .collect();
        assert_eq!(got, vec![(2, "a red cube"), (4, "a blue sphere")]);
        assert!(f.errors.is_empty());
    }

    #[test]
    fn jsonl_with_a_bad_line_reports_its_number_and_keeps_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "p.jsonl",
            b"{\"prompt\": \"a red cube\", \"seed\": 3}\n{\"prompt\": \n{\"prompt\": \"a torus\", \"name\": \"Torus #1\", \"steps\": 5}\n{\"prompt\": \"\"}\n",
        );
        let f = parse_prompt_file(&p).unwrap();
        assert_eq!(f.items.len(), 2);
        assert_eq!(f.items[0].seed, Some(3));
        assert_eq!(f.items[1].id(0), "torus-1");
        let lines: Vec<usize> = f
            .errors
            .iter()
            .map(|e| match e {
                BatchError::Line { line, .. } => *line,
                other => panic!("unexpected {other}"),
            })
            .collect();
        assert_eq!(lines, vec![2, 4]);
        assert!(f.errors[0]
            .to_string()
            .starts_with(&format!("{}:2:", p.display())));
    }

    #[test]
    fn unreadable_inputs_are_clear_errors() {
        let d = tempfile::tempdir().unwrap();
        let missing = parse_prompt_file(&d.path().join("nope.txt")).unwrap_err();
        assert!(matches!(missing, BatchError::Unreadable { .. }));
        let latin1 = write(d.path(), "l.txt", b"a caf\xe9 table\n");
        assert!(matches!(
            parse_prompt_file(&latin1).unwrap_err(),
            BatchError::NotUtf8 { offset: 5, .. }
        ));
        let empty = write(d.path(), "e.txt", b"# nothing\n\n");
        assert!(matches!(
            parse_prompt_file(&empty).unwrap_err(),
            BatchError::Empty { .. }
        ));
    }

    #[test]
    fn prompt_checks_and_slugs() {
        assert!(check_prompt("  ").is_err());
        assert!(check_prompt(&"x".repeat(MAX_PROMPT_CHARS + 1)).is_err());
        assert!(check_prompt("a red cube").is_ok());
        assert_eq!(slug("A Red  Cube!"), "a-red-cube");
        assert_eq!(slug("¿?"), "prompt");
    }
}
