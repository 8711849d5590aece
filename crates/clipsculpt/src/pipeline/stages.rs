//! The stage recorder: each stage of a run, by name, with its wall time and its peak memory (the
//! host counting allocator on the CPU, the CUDA memory pool on a GPU:
//! [`crate::device::memory`]), from which the typed `seconds` and `memory` sections of
//! `report.json` are built.

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::Device;

use super::report::{MemorySection, StagePeakBytes, StageSeconds};
use crate::autodiff::memory::PeakMeter;
use crate::device::memory as device_memory;
use crate::device::Precision;
use crate::mesh::ExportReport;

/// The stage names of a `generate` run, in the order they run.
pub mod stage {
    /// Loading the models (measured once per process, before the run).
    pub const LOADING: &str = "loading";
    /// Text conditioning and prior sampling.
    pub const SAMPLING: &str = "sampling";
    /// The target's text embeddings and the before/after (and held-out) scores.
    pub const SCORING: &str = "scoring";
    /// Exploration (the part of [`OPTIMIZING`] that chose the start).
    pub const EXPLORING: &str = "exploring";
    /// CLIP-guided optimization.
    pub const OPTIMIZING: &str = "optimizing";
    /// Writing the latents.
    pub const LATENTS: &str = "latents";
    /// The preview sheets.
    pub const PREVIEWS: &str = "previews";
    /// The graph-free export (its own timings are in [`crate::mesh::ExportReport`]).
    pub const EXPORT: &str = "export";
    /// The exported mesh's held-aside views and their score ([`crate::guide::score_mesh`]).
    pub const MESH_SCORING: &str = "mesh_scoring";
}

/// What one stage took: seconds and peak bytes summed and maxed over its runs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageRecord {
    /// Wall seconds.
    pub seconds: f64,
    /// Peak bytes in use on the device's meter (absolute).
    pub peak_bytes: u64,
    /// Peak host heap bytes above the stage's start (0 without the counting allocator).
    pub heap_above_start: usize,
}

/// Records the stages of one run on one device, by name.
#[derive(Debug)]
pub(crate) struct StageRecorder {
    device: Device,
    started: Instant,
    stages: BTreeMap<&'static str, StageRecord>,
}

impl StageRecorder {
    /// A recorder whose run starts now on `device`.
    pub(crate) fn new(device: &Device) -> Self {
        Self {
            device: device.clone(),
            started: Instant::now(),
            stages: BTreeMap::new(),
        }
    }

    /// Adds a stage measured elsewhere (the models' loading).
    pub(crate) fn record(&mut self, name: &'static str, seconds: f64, peak_bytes: u64) {
        self.add(
            name,
            StageRecord {
                seconds,
                peak_bytes,
                heap_above_start: 0,
            },
        );
    }

    /// Runs `f` as (another part of) stage `name`: resets the high-water marks, times it and
    /// records its peaks. A stage run twice adds its seconds and keeps the larger peak.
    pub(crate) fn run<T, E>(
        &mut self,
        name: &'static str,
        f: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<candle_core::Error>,
    {
        let t = Instant::now();
        let heap = PeakMeter::start();
        device_memory::reset_peak(&self.device)?;
        let out = f()?;
        let record = StageRecord {
            peak_bytes: device_memory::peak_bytes(&self.device)?,
            heap_above_start: heap.peak_above_base(),
            seconds: t.elapsed().as_secs_f64(),
        };
        self.add(name, record);
        Ok(out)
    }

    /// Moves `seconds` of stage `from` to stage `to` (the exploration measured inside the
    /// optimization); `from` keeps at least 0.
    pub(crate) fn move_seconds(&mut self, from: &'static str, to: &'static str, seconds: f64) {
        let left = self.get(from).seconds - seconds;
        self.stages.entry(from).or_default().seconds = left.max(0.0);
        self.stages.entry(to).or_default().seconds += seconds;
    }

    /// What stage `name` took (zeros if it never ran).
    pub(crate) fn get(&self, name: &str) -> StageRecord {
        self.stages.get(name).copied().unwrap_or_default()
    }

    /// The `seconds` section: the stages, the export's own timings (`export`), and the total
    /// (loading plus the wall time since [`Self::new`]), `other` being what they leave of it.
    pub(crate) fn seconds(&self, export: Option<&ExportReport>) -> StageSeconds {
        let secs = |name| self.get(name).seconds;
        let [mesh_grid, mesh_surface, mesh_colours, _] = export.map_or([0.0; 4], |e| e.seconds);
        let files: BTreeMap<String, f64> = export
            .map(|e| e.format_seconds.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|(f, secs)| (f.file_name("mesh"), *secs))
            .collect();
        let stages = [
            stage::LOADING,
            stage::SAMPLING,
            stage::SCORING,
            stage::EXPLORING,
            stage::OPTIMIZING,
            stage::LATENTS,
            stage::PREVIEWS,
            stage::MESH_SCORING,
        ];
        let counted = stages.iter().map(|n| secs(n)).sum::<f64>()
            + mesh_grid
            + mesh_surface
            + mesh_colours
            + files.values().sum::<f64>();
        let total = secs(stage::LOADING) + self.started.elapsed().as_secs_f64();
        StageSeconds {
            loading: secs(stage::LOADING),
            sampling: secs(stage::SAMPLING),
            scoring: secs(stage::SCORING),
            exploring: secs(stage::EXPLORING),
            optimizing: secs(stage::OPTIMIZING),
            latents: secs(stage::LATENTS),
            previews: secs(stage::PREVIEWS),
            mesh_grid,
            mesh_surface,
            mesh_colours,
            mesh_scoring: secs(stage::MESH_SCORING),
            files,
            other: (total - counted).max(0.0),
            total,
        }
    }

    /// The `memory` section: the device and its meter, the weights' `dtype`, the peak of each
    /// stage (the latents' and the previews' together) and the export's cache release.
    pub(crate) fn memory(
        &self,
        dtype: Precision,
        export: Option<&ExportReport>,
    ) -> candle_core::Result<MemorySection> {
        let peak = |name| self.get(name).peak_bytes;
        Ok(MemorySection {
            device: device_memory::device_label(&self.device)?,
            meter: device_memory::meter(&self.device),
            dtype,
            peak_bytes: StagePeakBytes {
                loading: peak(stage::LOADING),
                sampling: peak(stage::SAMPLING),
                scoring: peak(stage::SCORING),
                optimizing: peak(stage::OPTIMIZING),
                previews: peak(stage::LATENTS).max(peak(stage::PREVIEWS)),
                export: peak(stage::EXPORT),
            },
            export_release: export.map(|e| e.memory_before.trim).unwrap_or_default(),
        })
    }

    fn add(&mut self, name: &'static str, record: StageRecord) {
        let r = self.stages.entry(name).or_default();
        r.seconds += record.seconds;
        r.peak_bytes = r.peak_bytes.max(record.peak_bytes);
        r.heap_above_start = r.heap_above_start.max(record.heap_above_start);
    }
}
