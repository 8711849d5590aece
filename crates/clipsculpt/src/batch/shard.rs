//! `--shard i/n`: item k of a batch belongs to shard `k mod n`, so n shards cover every item
//! exactly once. Defaults come from Slurm array jobs or Kubernetes indexed Jobs.

use std::fmt;
use std::str::FromStr;

use super::prompts::BatchError;

/// One of `count` disjoint parts of a batch (0-based `index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub(crate) index: usize,
    /// Number of shards.
    pub(crate) count: usize,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

impl Shard {
    /// Whether the item at position `k` (0-based, in file order) belongs to this shard.
    pub(crate) fn owns(&self, k: usize) -> bool {
        k % self.count == self.index
    }

    /// The shard from the scheduler's environment, looked up through `var`:
    /// Slurm (`SLURM_ARRAY_TASK_ID` − `SLURM_ARRAY_TASK_MIN`, of `SLURM_ARRAY_TASK_COUNT`) or
    /// Kubernetes (`JOB_COMPLETION_INDEX`, with the count from `--shard-count`). `None` when
    /// neither is set.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
        shard_count: Option<usize>,
    ) -> Result<Option<Shard>, BatchError> {
        let num = |name: &str| -> Result<Option<usize>, BatchError> {
            var(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        BatchError::Shard(format!("{name}={v} is not a non-negative integer"))
                    })
                })
                .transpose()
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = match (num("SLURM_ARRAY_TASK_COUNT")?, shard_count) {
                (_, Some(c)) | (Some(c), None) => c,
                (None, None) => {
                    return Err(BatchError::Shard(
                        "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not; pass --shard-count".into(),
                    ))
                }
            };
            let index = id.checked_sub(min).ok_or_else(|| {
                BatchError::Shard(format!(
                    "SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"
                ))
            })?;
            return Shard::new(index, count).map(Some);
        }
        if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = shard_count.ok_or_else(|| {
                BatchError::Shard(
                    "JOB_COMPLETION_INDEX is set; pass --shard-count (the Job's completions)"
                        .into(),
                )
            })?;
            return Shard::new(index, count).map(Some);
        }
        Ok(None)
    }

    /// A checked shard.
    pub(crate) fn new(index: usize, count: usize) -> Result<Shard, BatchError> {
        if count == 0 || index >= count {
            return Err(BatchError::Shard(format!(
                "shard {index}/{count} is out of range: the index must be below the count (0-based)"
            )));
        }
        Ok(Shard { index, count })
    }
}

impl FromStr for Shard {
    type Err = BatchError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            BatchError::Shard(format!(
                "invalid shard '{s}': expected INDEX/COUNT with 0 <= INDEX < COUNT, e.g. 0/4"
            ))
        };
        let (i, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let i = i.trim().parse().map_err(|_| bad())?;
        let n = n.trim().parse().map_err(|_| bad())?;
        Shard::new(i, n)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn parse_table() {
        assert_eq!(
            "0/1".parse::<Shard>().unwrap(),
            Shard { index: 0, count: 1 }
        );
        assert_eq!(
            " 3 / 8 ".parse::<Shard>().unwrap(),
            Shard { index: 3, count: 8 }
        );
        for bad in ["", "1", "1/1", "8/8", "0/0", "-1/4", "a/4", "1/b", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn shards_cover_every_item_exactly_once() {
        for n in 1..6 {
            let mut seen = [0; 23];
            for i in 0..n {
                let s = Shard::new(i, n).unwrap();
                (0..23).filter(|&k| s.owns(k)).for_each(|k| seen[k] += 1);
            }
            assert!(seen.iter().all(|&c| c == 1), "n = {n}");
        }
    }

    #[test]
    fn environment_defaults() {
        let env = |pairs: &[(&str, &str)]| {
            let m: HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            move |k: &str| m.get(k).cloned()
        };
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ]);
        assert_eq!(
            Shard::from_env(slurm, None).unwrap(),
            Some(Shard { index: 1, count: 3 })
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "2")]);
        assert_eq!(
            Shard::from_env(&k8s, Some(4)).unwrap(),
            Some(Shard { index: 2, count: 4 })
        );
        assert!(Shard::from_env(&k8s, None).is_err());
        assert!(Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "4")]), Some(4)).is_err());
        assert_eq!(Shard::from_env(env(&[]), None).unwrap(), None);
    }
}
