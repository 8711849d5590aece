//! `clipsculpt download`: fetch a model's files into the Hugging Face cache.

use std::process::ExitCode;

use anyhow::{bail, Context as _};
use clap::Args as ClapArgs;

use crate::context::Context;
use crate::EXIT_OK;
use clipsculpt::models::{ModelKind, ModelSpec};

/// Download a model's files into the Hugging Face cache (HF_HOME).
#[derive(Debug, ClapArgs)]
pub(super) struct Download {
    /// A hub id such as openai/shap-e or `openai/clip-vit-base-patch32[@revision]`.
    spec: ModelSpec,
    /// Which layout to fetch (guessed from the id when absent).
    #[arg(long, value_enum)]
    kind: Option<ModelKind>,
}

impl Download {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let kind = self.kind.unwrap_or_else(|| ModelKind::guess(&self.spec));
        let ModelSpec::Hub { .. } = &self.spec else {
            bail!(
                "`download` takes a hub id such as openai/shap-e, not '{}'",
                self.spec
            );
        };
        let dir = cx
            .resolve(&self.spec, kind)
            .with_context(|| format!("downloading {}", self.spec))?;
        println!("{}", dir.display());
        Ok(ExitCode::from(EXIT_OK))
    }
}
