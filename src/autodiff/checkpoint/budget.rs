//! The budget policy: for a byte budget, the segmentation of a chain with the fewest recomputed
//! blocks, found by dynamic programming over segment boundaries.
//!
//! Why DP and not Revolve: our engine recomputes each checkpointed segment once, with its graph
//! (one level, as `torch.utils.checkpoint`); Revolve's binomial schedules are optimal for *nested*
//! recomputation of a homogeneous chain with one block taped at a time, and minimise advances for
//! a fixed number of slots. For the one-level schedules the engine executes, and for blocks of
//! unequal cost (the CLIP patch embedding, the prior's first block, decoder layers of different
//! widths), the exact optimum is a DP over boundaries; it is cheap for the chains we have (N ≤ 48).
//!
//! Memory model (bytes), which the benchmark checks against the counting allocator:
//! `peak = Σ graph(stored blocks) + Σ input(checkpointed segments) + max graph(checkpointed
//! segment) + max backward(block) + 8·max input`: the fourth term is one block's backward
//! temporaries (candle accumulates each gradient as `zeros + g`, three tensors), the last the
//! boundary-sized tensors in flight (the outer gradient's accumulation, the recompute's `Var` copy
//! and VJP product, the loss head). The benchmark compares this prediction with the counting
//! allocator.

use super::plan::{Plan, PlanError, Segment};

/// Memory costs of one block, measured or estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockCost {
    /// Bytes of the block's input (what a checkpoint keeps).
    pub input_bytes: usize,
    /// Bytes the block's autograd graph keeps alive after its forward (activations).
    pub graph_bytes: usize,
    /// Peak bytes above the graph while the block's backward runs (temporaries, gradients).
    pub(crate) backward_bytes: usize,
}

/// Predicted peak bytes of running `plan` forward and backward (see the module docs).
pub fn predicted_peak(costs: &[BlockCost], plan: &Plan) -> usize {
    let graph = |s: &Segment| {
        costs[s.blocks.clone()]
            .iter()
            .map(|c| c.graph_bytes)
            .sum::<usize>()
    };
    let stored: usize = plan
        .segments
        .iter()
        .filter(|s| !s.checkpointed)
        .map(graph)
        .sum();
    let kept: usize = plan
        .segments
        .iter()
        .filter(|s| s.checkpointed)
        .map(|s| costs[s.blocks.start].input_bytes)
        .sum();
    let transient = plan
        .segments
        .iter()
        .filter(|s| s.checkpointed)
        .map(graph)
        .max()
        .unwrap_or(0);
    stored + kept + transient + scratch(costs)
}

fn scratch(costs: &[BlockCost]) -> usize {
    let backward = costs.iter().map(|c| c.backward_bytes).max().unwrap_or(0);
    let boundary = costs.iter().map(|c| c.input_bytes).max().unwrap_or(0);
    backward + 8 * boundary
}

/// The plan with the fewest recomputed blocks whose [`predicted_peak`] is within `budget`
/// (ties: the lower peak).
pub(crate) fn plan_for_budget(costs: &[BlockCost], budget: usize) -> Result<Plan, PlanError> {
    let n = costs.len();
    let a: Vec<usize> = costs.iter().map(|c| c.graph_bytes).collect();
    let prefix: Vec<usize> = std::iter::once(0)
        .chain(a.iter().scan(0, |acc, &x| {
            *acc += x;
            Some(*acc)
        }))
        .collect();
    // Candidate caps on the largest checkpointed segment's graph: every contiguous sum, or none.
    let mut caps: Vec<usize> = (0..n)
        .flat_map(|i| (i + 1..=n).map(move |j| (i, j)))
        .map(|(i, j)| prefix[j] - prefix[i])
        .collect();
    caps.push(0);
    caps.sort_unstable();
    caps.dedup();

    let mut best: Option<(usize, usize, Plan)> = None; // (recomputed, peak, plan)
    for &cap in &caps {
        // dp[i][r]: least permanent bytes for blocks 0..i with r recomputed blocks.
        const INF: usize = usize::MAX;
        let mut dp = vec![vec![INF; n + 1]; n + 1];
        let mut from = vec![vec![(0usize, false); n + 1]; n + 1];
        dp[0][0] = 0;
        for i in 0..n {
            for r in 0..=i {
                let m = dp[i][r];
                if m == INF {
                    continue;
                }
                if m + a[i] < dp[i + 1][r] {
                    dp[i + 1][r] = m + a[i];
                    from[i + 1][r] = (i, false);
                }
                for j in i + 1..=n {
                    if prefix[j] - prefix[i] > cap {
                        break;
                    }
                    let (r2, m2) = (r + j - i, m + costs[i].input_bytes);
                    if m2 < dp[j][r2] {
                        dp[j][r2] = m2;
                        from[j][r2] = (i, true);
                    }
                }
            }
        }
        for (r, _) in dp[n].iter().enumerate().filter(|(_, &m)| m != INF) {
            let plan = backtrack(&from, n, r);
            let peak = predicted_peak(costs, &plan);
            if peak <= budget {
                let better = match &best {
                    None => true,
                    Some((br, bp, _)) => (r, peak) < (*br, *bp),
                };
                if better {
                    best = Some((r, peak, plan));
                }
                break;
            }
        }
    }
    best.map(|(_, _, plan)| plan)
        .ok_or_else(|| PlanError::BudgetTooSmall {
            budget,
            needed: predicted_peak(costs, &Plan::uniform(n, 1, true)),
        })
}

fn backtrack(from: &[Vec<(usize, bool)>], n: usize, r: usize) -> Plan {
    let (mut j, mut r) = (n, r);
    let mut rev: Vec<Segment> = Vec::new();
    while j > 0 {
        let (i, ckpt) = from[j][r];
        if ckpt {
            r -= j - i;
        }
        // Merge runs of stored blocks into one stored segment.
        match rev.last_mut() {
            Some(last) if !ckpt && !last.checkpointed => last.blocks.start = i,
            _ => rev.push(Segment {
                blocks: i..j,
                checkpointed: ckpt,
            }),
        }
        j = i;
    }
    rev.reverse();
    Plan { segments: rev }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uniform(n: usize, s: usize, a: usize) -> Vec<BlockCost> {
        vec![
            BlockCost {
                input_bytes: s,
                graph_bytes: a,
                backward_bytes: a
            };
            n
        ]
    }

    /// Every plan of a short chain: each composition into segments, each segment stored or not.
    fn all_plans(n: usize) -> Vec<Plan> {
        let mut plans = Vec::new();
        for cuts in 0u32..(1 << (n - 1)) {
            let mut bounds = vec![0];
            bounds.extend((1..n).filter(|i| cuts & (1 << (i - 1)) != 0));
            bounds.push(n);
            let k = bounds.len() - 1;
            for kinds in 0u32..(1 << k) {
                plans.push(Plan {
                    segments: (0..k)
                        .map(|s| Segment {
                            blocks: bounds[s]..bounds[s + 1],
                            checkpointed: kinds & (1 << s) != 0,
                        })
                        .collect(),
                });
            }
        }
        plans
    }

    /// Against brute force over all plans of 7 non-uniform blocks, at many budgets, the DP finds
    /// the least recomputation that fits, and its plan's predicted peak fits.
    #[test]
    fn matches_brute_force_optimum() {
        let costs: Vec<BlockCost> = [
            (3, 20),
            (2, 35),
            (2, 10),
            (5, 40),
            (1, 15),
            (2, 25),
            (4, 30),
        ]
        .iter()
        .map(|&(s, a)| BlockCost {
            input_bytes: s,
            graph_bytes: a,
            backward_bytes: 2 * a,
        })
        .collect();
        let plans = all_plans(costs.len());
        for budget in (60..=330).step_by(7) {
            let brute = plans
                .iter()
                .filter(|p| predicted_peak(&costs, p) <= budget)
                .map(|p| p.recomputed_blocks())
                .min();
            match plan_for_budget(&costs, budget) {
                Ok(plan) => {
                    assert!(predicted_peak(&costs, &plan) <= budget);
                    assert_eq!(Some(plan.recomputed_blocks()), brute, "budget {budget}");
                }
                Err(PlanError::BudgetTooSmall { .. }) => assert_eq!(brute, None, "budget {budget}"),
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// A budget above store-all needs no recomputation; a tiny one is refused with the minimum.
    #[test]
    fn extremes() {
        let costs = uniform(12, 1, 10);
        let all = plan_for_budget(&costs, 1000).unwrap();
        assert_eq!(all.recomputed_blocks(), 0);
        let err = plan_for_budget(&costs, 5).unwrap_err();
        assert_eq!(
            err,
            PlanError::BudgetTooSmall {
                budget: 5,
                needed: 12 + 10 + 10 + 8
            }
        );
    }
}
