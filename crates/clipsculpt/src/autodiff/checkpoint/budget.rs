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
//! `peak = Σ graph(stored blocks) + Σ input(checkpointed segments) + max transient(checkpointed
//! segment) + max backward(block) + 8·max input`. A checkpointed segment's transient is what its
//! backward holds above its kept input: its graph when recomputed with one, or, when every block
//! has a hand-written VJP, the inputs of its later blocks plus the largest VJP's own peak. The
//! fourth term is one block's backward temporaries (candle accumulates each gradient as
//! `zeros + g`, three tensors), the last the boundary-sized tensors in flight (the outer
//! gradient's accumulation, the recompute's `Var` copy and VJP product, the loss head).

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
    /// Peak bytes above its input while the block's hand-written VJP runs
    /// ([`super::Block::input_vjp`]), when it has one.
    pub(crate) vjp_bytes: Option<usize>,
}

/// Bytes the backward of checkpointed segment `blocks` holds above its kept input (see the
/// module docs).
fn transient(costs: &[BlockCost], blocks: std::ops::Range<usize>) -> usize {
    let seg = &costs[blocks];
    let vjp: Option<Vec<usize>> = seg.iter().map(|c| c.vjp_bytes).collect();
    match vjp {
        Some(vjp) => {
            let later: usize = seg.iter().skip(1).map(|c| c.input_bytes).sum();
            later + vjp.into_iter().max().unwrap_or(0)
        }
        None => seg.iter().map(|c| c.graph_bytes).sum(),
    }
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
    let recompute = plan
        .segments
        .iter()
        .filter(|s| s.checkpointed)
        .map(|s| transient(costs, s.blocks.clone()))
        .max()
        .unwrap_or(0);
    stored + kept + recompute + scratch(costs)
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
    // trans[i][j]: the transient of checkpointed segment i..j (growing with j).
    let trans: Vec<Vec<usize>> = (0..n)
        .map(|i| {
            (0..=n)
                .map(|j| if j > i { transient(costs, i..j) } else { 0 })
                .collect()
        })
        .collect();
    // Candidate caps on the largest checkpointed segment's transient: every segment's, or none.
    let mut caps: Vec<usize> = (0..n)
        .flat_map(|i| trans[i][i + 1..].iter().copied())
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
                    if trans[i][j] > cap {
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
                backward_bytes: a,
                vjp_bytes: None,
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

    /// At each of `budgets`, the DP's plan fits and recomputes as few blocks as the best of all
    /// plans that fit (or both refuse).
    fn assert_matches_brute_force(costs: &[BlockCost], budgets: impl Iterator<Item = usize>) {
        let plans = all_plans(costs.len());
        for budget in budgets {
            let brute = plans
                .iter()
                .filter(|p| predicted_peak(costs, p) <= budget)
                .map(|p| p.recomputed_blocks())
                .min();
            match plan_for_budget(costs, budget) {
                Ok(plan) => {
                    assert!(predicted_peak(costs, &plan) <= budget);
                    assert_eq!(Some(plan.recomputed_blocks()), brute, "budget {budget}");
                }
                Err(PlanError::BudgetTooSmall { .. }) => assert_eq!(brute, None, "budget {budget}"),
                Err(e) => panic!("{e}"),
            }
        }
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
            vjp_bytes: None,
        })
        .collect();
        assert_matches_brute_force(&costs, (60..=330).step_by(7));
    }

    /// With hand-written VJPs (segments cost their later inputs and the largest VJP peak, not
    /// their graph) the DP still finds the brute-force optimum, and needs less than with graphs.
    #[test]
    fn lean_segments_match_brute_force_optimum() {
        let costs: Vec<BlockCost> = [(3, 20, 9), (2, 35, 12), (2, 10, 4), (5, 40, 15), (1, 15, 6)]
            .iter()
            .map(|&(s, a, v)| BlockCost {
                input_bytes: s,
                graph_bytes: a,
                backward_bytes: 2 * a,
                vjp_bytes: Some(v),
            })
            .collect();
        assert_matches_brute_force(&costs, (40..=250).step_by(5));
        let one_segment = Plan::uniform(costs.len(), costs.len(), true);
        let graphs: Vec<BlockCost> = costs
            .iter()
            .map(|c| BlockCost {
                vjp_bytes: None,
                ..*c
            })
            .collect();
        assert_eq!(
            predicted_peak(&costs, &one_segment),
            3 + (2 + 2 + 5 + 1) + 15 + 80 + 40
        );
        assert!(predicted_peak(&costs, &one_segment) < predicted_peak(&graphs, &one_segment));
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
