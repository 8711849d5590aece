//! Batch runs: prompt files (text or JSONL), sharding across machines (`--shard i/n`, Slurm array
//! jobs, Kubernetes indexed Jobs), an append-only manifest of finished items, and a runner that
//! resumes where an interrupted batch stopped without redoing or corrupting finished items.

mod manifest;
mod prompts;
mod runner;
mod shard;

pub use manifest::ManifestLines;
pub use prompts::{check_prompt, parse_prompt_bytes, BatchError, PromptFile, PromptItem};
pub use prompts::{parse_prompt_file, slug};
pub use runner::{run_batch, BatchSummary};
pub use shard::Shard;
