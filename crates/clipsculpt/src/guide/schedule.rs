//! Learning-rate schedule for the latent optimizer: linear warm-up, then cosine decay to a floor.

/// Warm-up + cosine schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    /// Peak learning rate.
    pub(crate) lr: f64,
    /// Steps of linear warm-up from 0.
    pub(crate) warmup: usize,
    /// Total steps.
    pub(crate) total: usize,
    /// Final rate as a fraction of the peak.
    pub(crate) floor: f64,
}

impl LrSchedule {
    /// Warm-up over the first tenth of `total` steps (at least one), then cosine decay to
    /// `floor × lr`.
    pub fn warmup_cosine(lr: f64, total: usize, floor: f64) -> Self {
        Self {
            lr,
            warmup: (total / 10).max(1),
            total,
            floor,
        }
    }

    /// The rate at 0-based `step`.
    pub fn at(&self, step: usize) -> f64 {
        if step < self.warmup {
            return self.lr * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let t = ((step - self.warmup) as f64 / span).min(1.0);
        let cos = 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
        self.lr * (self.floor + (1.0 - self.floor) * cos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rises linearly to the peak over the warm-up, then decays monotonically to the floor.
    #[test]
    fn warmup_then_cosine() {
        let s = LrSchedule {
            lr: 0.1,
            warmup: 4,
            total: 20,
            floor: 0.1,
        };
        assert!((s.at(0) - 0.025).abs() < 1e-12);
        assert!((s.at(3) - 0.1).abs() < 1e-12);
        assert!((s.at(4) - 0.1).abs() < 1e-12);
        assert!((s.at(20) - 0.01).abs() < 1e-12);
        assert!((4..20).all(|i| s.at(i + 1) <= s.at(i)));
    }
}
