//! `clipsculpt random-models`: random-weight model folders at published sizes, for timing and
//! memory checks of the code paths on hardware (their outputs are noise).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args as ClapArgs, ValueEnum};
use serde_json::json;

use super::context::{ensure_writable, Context};
use crate::EXIT_OK;
use clipsculpt::random::{toy_clip_config, write_random_clip, write_random_shap_e, ShapESizes};

/// The sizes to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Preset {
    /// Shap-E's prior (24 layers × 1024, 1024 latent rows) and decoder (256 wide) with a CLIP of
    /// ViT-B/16 geometry (vision 12 × 768, 224 px, patch 16; text 12 × 512).
    Published,
    /// The same Shap-E with a CLIP of ViT-L/14 geometry (vision 24 × 1024, 224 px, patch 14;
    /// text 12 × 768).
    Large,
    /// Tiny models that run in seconds on a CPU (a smoke test of the command).
    Small,
}

/// Write random-weight Shap-E and CLIP folders (OUT/shap_e, OUT/clip) at published sizes.
#[derive(Debug, ClapArgs)]
pub(crate) struct RandomModels {
    /// Output folder; gets `shap_e/` and `clip/` (loadable with --model OUT/shap_e --clip OUT/clip).
    out: PathBuf,
    /// Which sizes.
    #[arg(long, value_enum, default_value = "published")]
    preset: Preset,
    /// Seed of the weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// A CLIP config: the toy tokenizer's vocabulary, with the given text and vision geometry
/// `(width, layers, heads)`, image side, patch and projection size.
fn clip_config(
    text: (usize, usize, usize),
    vision: (usize, usize, usize),
    image: usize,
    patch: usize,
    projection: usize,
) -> serde_json::Value {
    let mut c = toy_clip_config(vision.0, vision.1, image, patch);
    c["projection_dim"] = json!(projection);
    for (key, (w, l, h)) in [("text_config", text), ("vision_config", vision)] {
        c[key]["hidden_size"] = json!(w);
        c[key]["intermediate_size"] = json!(4 * w);
        c[key]["num_hidden_layers"] = json!(l);
        c[key]["num_attention_heads"] = json!(h);
    }
    c
}

impl RandomModels {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        ensure_writable(&self.out)?;
        let shap_e = match self.preset {
            Preset::Published | Preset::Large => ShapESizes {
                d_hidden: 256,
                d_latent: 1024,
                prior_layers: 24,
                prior_width: Some(1024),
                text_width: 768,
            },
            Preset::Small => ShapESizes {
                d_hidden: 8,
                d_latent: 16,
                prior_layers: 1,
                prior_width: None,
                text_width: 16,
            },
        };
        let clip = match self.preset {
            Preset::Published => clip_config((512, 12, 8), (768, 12, 12), 224, 16, 512),
            Preset::Large => clip_config((768, 12, 12), (1024, 24, 16), 224, 14, 768),
            Preset::Small => toy_clip_config(16, 1, 16, 4),
        };
        let (s_dir, c_dir) = (self.out.join("shap_e"), self.out.join("clip"));
        write_random_shap_e(&s_dir, shap_e, self.seed)
            .with_context(|| format!("writing {}", s_dir.display()))?;
        write_random_clip(&c_dir, &clip, self.seed + 10)
            .with_context(|| format!("writing {}", c_dir.display()))?;
        if !cx.quiet {
            println!(
                "wrote {} and {} (random weights, {:?} sizes)",
                s_dir.display(),
                c_dir.display(),
                self.preset
            );
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
