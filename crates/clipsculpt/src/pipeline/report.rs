//! What a run writes to `report.json`: its settings, scores, trace, start choice, seconds and
//! memory per stage, mesh statistics and files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use candle_core::Device;
use serde::Serialize;

use super::candidates::NoiseChoice;
use super::models::{ModelSources, Models};
use super::settings::RunSettings;
use crate::device::device_name;
use crate::device::memory::{Meter, Trim};
use crate::device::Precision;
use crate::guide::{GuideSettings, GuideTrace, SamplingTrace, StartChoice};
use crate::mesh::{self, MemoryReport};

/// The settings a run used, as `report.json` records them.
#[derive(Debug, Clone, Serialize)]
pub struct ReportSettings {
    /// The run's settings, with the guidance scale resolved to the one used.
    #[serde(flatten)]
    pub run: RunSettings,
    /// The device it ran on (`cpu`, `cuda:0`).
    pub(crate) device: String,
    /// The frozen networks' matrix-weight dtype (`--dtype`: f32, bf16, f16).
    pub dtype: Precision,
}

impl ReportSettings {
    /// `s` as `models` ran it on `device`: the guidance scale, render side and held-aside side
    /// resolved to the ones used.
    pub(crate) fn resolved(s: &RunSettings, models: &Models, device: &Device) -> Self {
        let clip_side = models.scorer.image_size();
        Self {
            run: RunSettings {
                guidance_scale: Some(
                    s.guidance_scale
                        .unwrap_or(models.shap_e.sampling.guidance_scale as f64),
                ),
                guide: GuideSettings {
                    resolution: s.guide.render_side(clip_side),
                    eval_resolution: s.guide.eval_side(clip_side),
                    ..s.guide.clone()
                },
                ..s.clone()
            },
            device: device_name(device),
            dtype: models.precision,
        }
    }
}

/// Peak bytes in use during each stage of a run (absolute: the models' weights included),
/// as [`crate::device::memory::peak_bytes`] measures them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StagePeakBytes {
    /// Loading the models (once per process).
    pub loading: u64,
    /// Text conditioning and prior sampling.
    pub sampling: u64,
    /// The before/after scores (the larger of the two).
    pub(crate) scoring: u64,
    /// CLIP-guided optimization.
    pub optimizing: u64,
    /// Writing the latents and the preview sheets.
    pub(crate) previews: u64,
    /// The graph-free export (grid, surface, colours, files), after the cache release.
    pub export: u64,
}

/// The `memory` section of `report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct MemorySection {
    /// The device: `cpu`, or the GPU's name, ordinal and compute capability.
    pub device: String,
    /// What the figures measure: the host heap (CPU) or the CUDA memory pool.
    pub meter: Meter,
    /// The frozen networks' matrix-weight dtype.
    pub dtype: Precision,
    /// Peak bytes per stage.
    pub peak_bytes: StagePeakBytes,
    /// Reserved/used/free bytes before and after the cache release that precedes the export.
    pub export_release: Trim,
}

/// Memory in use when the export started, after the optimization state was dropped and the
/// device's cache released.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ExportMemory {
    /// Live heap bytes of the process (`None` without the counting allocator).
    pub host_live_bytes: Option<u64>,
    /// Free device bytes (`None` on the CPU).
    pub(crate) device_free_bytes: Option<u64>,
    /// Total device bytes (`None` on the CPU).
    pub(crate) device_total_bytes: Option<u64>,
}

impl From<&MemoryReport> for ExportMemory {
    fn from(m: &MemoryReport) -> Self {
        let bytes = |b: Option<usize>| b.map(|b| b as u64);
        Self {
            host_live_bytes: bytes(m.host_live_bytes),
            device_free_bytes: bytes(m.device_free_bytes),
            device_total_bytes: bytes(m.device_total_bytes),
        }
    }
}

/// Wall-clock seconds per stage of a run; the stages and `other` add up to `total`.
#[derive(Debug, Clone, Serialize)]
pub struct StageSeconds {
    /// Loading the models (once per process: every item of a batch reports the same load).
    pub loading: f64,
    /// Text conditioning and prior sampling.
    pub sampling: f64,
    /// The scoring CLIP's text embedding and the before/after (and held-out) scores.
    pub scoring: f64,
    /// Exploration: the bank (the prior sampled for the negatives), its completions and their
    /// scores ([`crate::guide::choose_start`]).
    pub exploring: f64,
    /// CLIP-guided optimization (without exploration).
    pub optimizing: f64,
    /// Writing the prior's and the final latent.
    pub latents: f64,
    /// The two 20-view preview sheets (`preview_prior.png`, `preview.png`).
    pub previews: f64,
    /// Building the field from the latent, releasing the device's caches and sampling the field
    /// on the export grid.
    pub mesh_grid: f64,
    /// Marching cubes.
    pub mesh_surface: f64,
    /// Vertex colours from the field.
    pub mesh_colours: f64,
    /// Rendering the exported mesh's held-aside views and scoring them.
    pub mesh_scoring: f64,
    /// Writing each export file, by file name.
    pub files: BTreeMap<String, f64>,
    /// Everything else (creating the folder, progress reporting, bookkeeping).
    pub other: f64,
    /// Loading plus the run's wall time up to writing `report.json`.
    pub total: f64,
}

impl StageSeconds {
    /// One line for the progress output: the total, then each stage that took at least 5 ms,
    /// in the order they ran (`mesh` = grid, surface and colours; `files` = every export file).
    pub fn summary(&self) -> String {
        let mesh = self.mesh_grid + self.mesh_surface + self.mesh_colours;
        let files: f64 = self.files.values().sum();
        let parts = [
            ("loading", self.loading),
            ("sampling", self.sampling),
            ("scoring", self.scoring),
            ("exploring", self.exploring),
            ("optimizing", self.optimizing),
            ("latents", self.latents),
            ("previews", self.previews),
            ("mesh", mesh),
            ("mesh scoring", self.mesh_scoring),
            ("files", files),
            ("other", self.other),
        ];
        let shown: Vec<String> = parts
            .iter()
            .filter(|(_, s)| *s >= 0.005)
            .map(|(name, s)| format!("{name} {s:.2}"))
            .collect();
        format!("{:.2} s: {}", self.total, shown.join(", "))
    }
}

/// What a run wrote to `report.json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// clipsculpt version.
    pub(crate) version: &'static str,
    /// The prompt.
    pub(crate) prompt: String,
    /// Model folders.
    pub(crate) models: ModelSources,
    /// Seed, steps and other settings.
    pub settings: ReportSettings,
    /// How the noise was chosen among `--candidates` (absent with one candidate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub noise: Option<NoiseChoice>,
    /// Guided sampling through the prior: σ, CLIP cosine, loss, clipped share and push of every
    /// guided sampler step, skipped steps (empty unless the mode guides the sampler).
    pub sampling: SamplingTrace,
    /// The latent optimization: per-step CLIP cosine and loss, skipped steps, held-aside
    /// evaluations (empty unless the mode optimizes the latent).
    pub trace: GuideTrace,
    /// How exploration chose the start (bank scores, probes, the winner).
    pub(crate) start: StartChoice,
    /// Held-aside score ([`crate::guide::Score`]) of the prior's latent (guided or not): four
    /// fixed views, minus the CLIP term (the bare cosine without negatives).
    pub score_before: f32,
    /// The same of the exported latent (after the latent optimization, never below
    /// `score_before`).
    pub score_after: f32,
    /// Mean scoring-CLIP cosine to the prompt of the same views, before.
    pub cosine_before: f32,
    /// After.
    pub cosine_after: f32,
    /// Negative prompts the CLIP term contrasted against.
    pub(crate) negatives: usize,
    /// The held-out CLIP's cosine before and after, when one was given.
    pub(crate) held_out_scores: Option<[f32; 2]>,
    /// Seconds per stage.
    pub seconds: StageSeconds,
    /// Peak heap bytes of the optimization above its start (counting allocator; 0 when not
    /// installed).
    pub(crate) peak_optimize_bytes: usize,
    /// Memory in use when the export started, after optimization state was dropped (host heap;
    /// device free/total under CUDA).
    pub memory_before_export: ExportMemory,
    /// Device, dtype, peak bytes per stage and the cache release before the export.
    pub memory: MemorySection,
    /// The held-aside score of the exported mesh's own views ([`crate::guide::score_mesh`]: the
    /// same cameras, backgrounds and CLIP term as `score_after`, drawn by the mesh rasteriser);
    /// `None` without a mesh.
    pub mesh_score: Option<f32>,
    /// The mean scoring-CLIP cosine to the prompt of the same views.
    pub mesh_cosine: Option<f32>,
    /// The iso level the mesh was extracted at (`None` without a mesh).
    pub iso_level: Option<f32>,
    /// How it was chosen: `zero` (the field crosses 0) or `midpoint` (0 lies outside the field's
    /// range; `docs/mesh.md`, "The iso level").
    pub iso_rule: Option<mesh::IsoRule>,
    /// SHA-256 of the exported latent's values ([`super::provenance::latent_sha256`]).
    pub latent_sha256: String,
    /// Mesh statistics (`None` when the latent has no surface to extract).
    pub mesh: Option<mesh::MeshStats>,
    /// The exported mesh's measures (after smoothing, simplification and UV seams).
    pub asset_mesh: Option<mesh::MeshStats>,
    /// What the asset stage did: faces before and after simplification and its error, texture, size.
    pub asset: Option<mesh::AssetReport>,
    /// Why the run wrote no mesh (the latent's field has no surface, or is not finite), when it did not.
    pub no_mesh: Option<String>,
    /// Files written.
    pub files: Vec<PathBuf>,
    /// What the run was made from (`vary`, `edit`): the command, the strength and the parents.
    #[serde(flatten)]
    pub lineage: super::lineage::Lineage,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_summary_lists_the_stages_that_took_time() {
        let s = StageSeconds {
            loading: 0.001,
            sampling: 3.0,
            scoring: 0.3,
            exploring: 0.0,
            optimizing: 0.0,
            latents: 0.002,
            previews: 0.29,
            mesh_grid: 0.2,
            mesh_surface: 0.003,
            mesh_colours: 0.005,
            mesh_scoring: 0.02,
            files: BTreeMap::from([("mesh.glb".to_string(), 0.01), ("mesh.ply".into(), 0.02)]),
            other: 0.004,
            total: 3.9,
        };
        assert_eq!(
            s.summary(),
            "3.90 s: sampling 3.00, scoring 0.30, previews 0.29, mesh 0.21, mesh scoring 0.02, files 0.03"
        );
    }
}
