//! Checkpoint policies — *what* to keep — and the segment plans they produce for a chain of blocks.

use std::fmt;
use std::str::FromStr;

use super::budget::{self, BlockCost};
use super::plan::{Plan, PlanError, Segment};
use crate::autodiff::memory::parse_bytes;

/// How a chain of N blocks is checkpointed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// No checkpointing: every block keeps its activations (fastest, most memory): what its
    /// hand-written VJP needs where it has one ([`super::Block::forward_kept`]), else its graph.
    None,
    /// Segments of `k` consecutive blocks, each checkpointed (its input kept, recomputed once in
    /// backward). `EveryK(1)` checkpoints every block.
    EveryK(usize),
    /// Segments of ⌈√N⌉ blocks (Chen et al. 2016): memory O(√N), one extra forward.
    Sqrt,
    /// The last `n` blocks are checkpointed one by one; the first N − n keep their graphs.
    LastN(usize),
    /// The plan with the fewest recomputed blocks whose predicted peak fits this many bytes.
    Budget(usize),
}

impl Policy {
    /// Every block checkpointed (`--checkpoint blocks`).
    pub const BLOCKS: Policy = Policy::EveryK(1);

    /// The segment plan for `n` blocks. `costs` (one per block) are needed by [`Policy::Budget`]
    /// only; the other policies ignore them.
    pub fn plan(&self, n: usize, costs: Option<&[BlockCost]>) -> Result<Plan, PlanError> {
        let every = |k: usize| Plan::uniform(n, k.max(1), true);
        Ok(match *self {
            Policy::None => Plan::uniform(n, n.max(1), false),
            Policy::EveryK(k) => every(k),
            Policy::Sqrt => every((n as f64).sqrt().ceil() as usize),
            Policy::LastN(k) => {
                let k = k.min(n);
                let mut segments = Vec::new();
                if k < n {
                    segments.push(Segment {
                        blocks: 0..n - k,
                        checkpointed: false,
                    });
                }
                segments.extend((n - k..n).map(|i| Segment {
                    blocks: i..i + 1,
                    checkpointed: true,
                }));
                Plan { segments }
            }
            Policy::Budget(bytes) => {
                let costs = costs.ok_or(PlanError::CostsNeeded)?;
                if costs.len() != n {
                    return Err(PlanError::CostsMismatch {
                        blocks: n,
                        costs: costs.len(),
                    });
                }
                budget::plan_for_budget(costs, bytes)?
            }
        })
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim().to_ascii_lowercase();
        let number = |v: &str| {
            v.parse::<usize>().ok().filter(|&k| k > 0).ok_or_else(|| {
                format!("invalid checkpoint policy '{s}': '{v}' is not a positive integer")
            })
        };
        match s.as_str() {
            "none" => Ok(Policy::None),
            "blocks" | "every" => Ok(Policy::BLOCKS),
            "sqrt" => Ok(Policy::Sqrt),
            _ => match s.split_once(':') {
                Some(("every", k)) => number(k).map(Policy::EveryK),
                Some(("last", k)) => number(k).map(Policy::LastN),
                Some(("budget", b)) => parse_bytes(b).map(Policy::Budget),
                _ => Err(format!(
                    "invalid checkpoint policy '{s}': expected none, blocks, sqrt, every:K, last:N or budget:SIZE"
                )),
            },
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Policy::None => write!(f, "none"),
            Policy::EveryK(1) => write!(f, "blocks"),
            Policy::EveryK(k) => write!(f, "every:{k}"),
            Policy::Sqrt => write!(f, "sqrt"),
            Policy::LastN(n) => write!(f, "last:{n}"),
            Policy::Budget(b) => write!(f, "budget:{}", bytes_text(*b)),
        }
    }
}

/// `bytes` in the largest binary unit that divides it exactly (`2GiB`, `1536KiB`, `1000`), as `parse_bytes` reads.
fn bytes_text(bytes: usize) -> String {
    for (unit, size) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// Written as its command-line form (`"blocks"`, `"budget:1KiB"`), as in `report.json`.
impl serde::Serialize for Policy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Read from its command-line form, as settings files and `report.json` hold it.
impl<'de> serde::Deserialize<'de> for Policy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_policies() {
        let ok = [
            ("none", Policy::None),
            ("blocks", Policy::EveryK(1)),
            ("sqrt", Policy::Sqrt),
            ("every:3", Policy::EveryK(3)),
            ("last:2", Policy::LastN(2)),
            ("budget:1KiB", Policy::Budget(1024)),
            ("budget:2gb", Policy::Budget(2_000_000_000)),
        ];
        for (s, p) in ok {
            assert_eq!(s.parse::<Policy>(), Ok(p), "{s}");
            assert_eq!(p.to_string().parse::<Policy>(), Ok(p));
        }
        assert_eq!(Policy::Budget(2 << 30).to_string(), "budget:2GiB");
        assert_eq!(Policy::Budget(1536 << 10).to_string(), "budget:1536KiB");
        for bad in [
            "",
            "all",
            "every:0",
            "every:x",
            "last:",
            "budget:lots",
            "sqrt:2",
        ] {
            assert!(bad.parse::<Policy>().is_err(), "{bad} should be rejected");
        }
    }

    /// N = 16: sqrt → 4 segments of 4, all recomputed (16 extra block forwards); every:5 → 5,5,5,1;
    /// last:3 → one stored segment of 13 blocks and three checkpointed single blocks.
    #[test]
    fn plans_follow_their_definitions() {
        let sqrt = Policy::Sqrt.plan(16, None).unwrap();
        assert_eq!(sqrt.segments.len(), 4);
        assert_eq!((sqrt.recomputed_blocks(), sqrt.checkpoints()), (16, 4));
        let every = Policy::EveryK(5).plan(16, None).unwrap();
        let lens: Vec<usize> = every.segments.iter().map(|s| s.blocks.len()).collect();
        assert_eq!(lens, vec![5, 5, 5, 1]);
        let last = Policy::LastN(3).plan(16, None).unwrap();
        assert_eq!(
            last.segments[0],
            Segment {
                blocks: 0..13,
                checkpointed: false
            }
        );
        assert_eq!((last.recomputed_blocks(), last.checkpoints()), (3, 3));
        let none = Policy::None.plan(16, None).unwrap();
        assert_eq!((none.recomputed_blocks(), none.segments.len()), (0, 1));
        assert_eq!(Policy::Budget(1).plan(4, None), Err(PlanError::CostsNeeded));
    }
}
