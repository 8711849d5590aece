//! One tensor that does not match what a config implies.

use std::fmt;

/// One problem with one tensor of a weight file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorProblem {
    /// The model needs `name` with this shape; the file does not have it.
    Missing {
        /// Checkpoint key.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
    },
    /// The file has `name` with another shape.
    Shape {
        /// Checkpoint key.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// The file has `name` with a dtype that is not a float (f16, bf16, f32, f64).
    DType {
        /// Checkpoint key.
        name: String,
        /// dtype in the file.
        found: String,
    },
}

impl fmt::Display for TensorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorProblem::Missing { name, expected } => {
                write!(f, "missing tensor {name} (expected shape {expected:?})")
            }
            TensorProblem::Shape {
                name,
                expected,
                found,
            } => write!(
                f,
                "tensor {name} has shape {found:?}, expected {expected:?}"
            ),
            TensorProblem::DType { name, found } => write!(
                f,
                "tensor {name} has dtype {found}, expected a float (f16, bf16, f32)"
            ),
        }
    }
}

/// The problems, one per indented line.
pub(super) struct ProblemList<'a>(pub(super) &'a [TensorProblem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}
