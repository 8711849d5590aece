//! Finding the `blender` executable: `--blender-path`, else the `BLENDER` environment variable, else `blender`
//! on `PATH`. A miss is [`BlenderError::NotFound`], whose one-line message says how to install Blender.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::error::BlenderError;

/// Name of the environment variable that may name the Blender executable.
pub(crate) const BLENDER_ENV: &str = "BLENDER";

/// Where to look for Blender, in order: an explicit path (flag), the `BLENDER` variable, the `PATH` variable.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// `--blender-path`.
    pub(crate) explicit: Option<PathBuf>,
    /// The value of `BLENDER`, when set and not empty.
    pub(crate) env: Option<PathBuf>,
    /// The value of `PATH`.
    pub(crate) path_var: Option<std::ffi::OsString>,
}

impl Lookup {
    /// `explicit` plus this process's `BLENDER` and `PATH`.
    pub fn from_env(explicit: Option<PathBuf>) -> Lookup {
        Lookup {
            explicit,
            env: std::env::var_os(BLENDER_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
            path_var: std::env::var_os("PATH"),
        }
    }

    /// The Blender executable to run. A named path (flag or variable) that is not an executable file is an
    /// error of its own, so a typo is not hidden by another Blender on `PATH`.
    pub fn find(&self) -> Result<PathBuf, BlenderError> {
        for (named, what) in [(&self.explicit, "--blender-path"), (&self.env, BLENDER_ENV)] {
            if let Some(p) = named {
                let resolved = if p.components().count() == 1 {
                    search_path(p.as_os_str(), self.path_var.as_deref())
                } else {
                    is_executable(p).then(|| p.clone())
                };
                return resolved.ok_or_else(|| BlenderError::NotFound {
                    looked: format!("{what} = {}", p.display()),
                });
            }
        }
        search_path(OsStr::new("blender"), self.path_var.as_deref()).ok_or_else(|| {
            BlenderError::NotFound {
                looked: "`blender` on PATH (no --blender-path, BLENDER unset)".into(),
            }
        })
    }
}

/// The first executable file `name` in the folders of `path_var`.
fn search_path(name: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

/// A regular file (after symlinks) that may be executed.
fn is_executable(p: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(p) else {
        return false;
    };
    if !meta.is_file() {
        return false;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_blender(dir: &Path, name: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        p
    }

    #[test]
    fn order_is_flag_then_env_then_path() {
        let d = tempfile::tempdir().unwrap();
        let on_path = fake_blender(d.path(), "blender", 0o755);
        let other = fake_blender(d.path(), "blender-4.2", 0o755);
        let path_var = Some(d.path().as_os_str().to_owned());
        let l = Lookup {
            explicit: None,
            env: None,
            path_var: path_var.clone(),
        };
        assert_eq!(l.find().unwrap(), on_path);
        let l = Lookup {
            env: Some(other.clone()),
            ..l
        };
        assert_eq!(l.find().unwrap(), other);
        // A bare name in the flag is searched on PATH.
        let l = Lookup {
            explicit: Some("blender".into()),
            ..l
        };
        assert_eq!(l.find().unwrap(), on_path);
    }

    #[test]
    fn misses_name_what_was_tried_and_how_to_install() {
        let d = tempfile::tempdir().unwrap();
        let l = Lookup {
            explicit: None,
            env: None,
            path_var: Some(d.path().as_os_str().to_owned()),
        };
        let msg = l.find().unwrap_err().to_string();
        assert!(
            msg.contains("PATH") && msg.contains("apt-get install blender"),
            "{msg}"
        );
        assert_eq!(msg.lines().count(), 1, "{msg}");
        // A named file that is not executable is not silently replaced by PATH's.
        fake_blender(d.path(), "blender", 0o755);
        let text = fake_blender(d.path(), "notes.txt", 0o644);
        let l = Lookup {
            env: Some(text),
            ..l
        };
        let msg = l.find().unwrap_err().to_string();
        assert!(msg.contains("BLENDER = "), "{msg}");
    }
}
