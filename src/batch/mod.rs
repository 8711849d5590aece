//! Batch runs: prompt files (text or JSONL), sharding across machines (`--shard i/n`, Slurm array
//! jobs, Kubernetes indexed Jobs), an append-only manifest of finished items, and a runner that
//! resumes where an interrupted batch stopped without redoing or corrupting finished items.

mod manifest;
mod prompts;
mod runner;
mod shard;

pub use manifest::{Manifest, ManifestLines, Record, Status};
pub use prompts::{
    check_prompt, parse_prompt_bytes, parse_prompt_file, slug, BatchError, PromptFile, PromptItem,
    MAX_PROMPT_CHARS,
};
pub use runner::{run_batch, BatchSummary};
pub use shard::Shard;
