//! [`BlenderError`]: what can go wrong when a preview is rendered in Blender. Every message is one line.

use std::path::PathBuf;

/// An error of a Blender preview.
#[derive(Debug, thiserror::Error)]
pub enum BlenderError {
    /// No Blender executable was found.
    #[error(
        "Blender not found (looked for {looked}); install it (Debian/Ubuntu: `sudo apt-get install blender`, \
         others: https://www.blender.org/download/) and put `blender` on PATH, or pass --blender-path or set BLENDER"
    )]
    NotFound {
        /// Where we looked.
        looked: String,
    },
    /// The input is not a run folder with a mesh, nor a mesh file.
    #[error("{path}: {reason}")]
    Input {
        /// The input given.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Blender could not be started.
    #[error("cannot start Blender {exe}: {source}")]
    Spawn {
        /// The executable.
        exe: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Blender ran longer than allowed and was stopped.
    #[error("Blender ran longer than {seconds} s and was stopped (raise --blender-timeout); its output is in {log}")]
    Timeout {
        /// The limit.
        seconds: u64,
        /// Where Blender's output was kept.
        log: PathBuf,
    },
    /// Blender exited with an error, or without writing what it should have.
    #[error("Blender failed ({status}): {last_line}; its output is in {log}")]
    Failed {
        /// Exit status, or what was missing.
        status: String,
        /// The most telling line of Blender's output.
        last_line: String,
        /// Where Blender's output was kept.
        log: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A rendered image could not be read.
    #[error("{path}: cannot read the image ({reason})")]
    Image {
        /// The image.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

impl BlenderError {
    /// Wraps an I/O error with its path.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BlenderError {
        let path = path.into();
        move |source| BlenderError::Io { path, source }
    }
}
