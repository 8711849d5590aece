//! `clipsculpt blender-addon`: writes the Blender add-on (`addon/clipsculpt_addon`, embedded in the
//! binary) as an installable zip, and with `--install` installs and enables it in the user's Blender.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{bail, Context as _};
use clap::Args as ClapArgs;

use crate::EXIT_OK;
use clipsculpt::atomic::write_atomic;
use clipsculpt::blender::Lookup;

/// The add-on's module name (its folder in the zip and in Blender's add-ons).
const MODULE: &str = "clipsculpt_addon";
/// The add-on's files, by their path in the zip.
const FILES: [(&str, &str); 1] = [(
    "clipsculpt_addon/__init__.py",
    include_str!("../addon/clipsculpt_addon/__init__.py"),
)];
/// Installs the zip named after `--` and enables it, then prints where it went.
const INSTALL: &str = "import sys, bpy, addon_utils
zip = sys.argv[sys.argv.index('--') + 1]
bpy.ops.preferences.addon_install(filepath=zip, overwrite=True)
bpy.ops.preferences.addon_enable(module='clipsculpt_addon')
bpy.ops.wm.save_userpref()
loaded = addon_utils.check('clipsculpt_addon')[1]
if not loaded:
    raise SystemExit('the add-on did not load')
print('CLIPSCULPT_ADDON', bpy.utils.user_resource('SCRIPTS', path='addons'))";

/// Write the Blender add-on's zip (a sidebar panel that runs clipsculpt and imports the result),
/// or install it into Blender.
#[derive(Debug, ClapArgs)]
pub(super) struct BlenderAddon {
    /// Folder to write clipsculpt_addon.zip into [default: the current folder; with --install, a
    /// temporary one]
    #[arg(long)]
    out: Option<PathBuf>,
    /// Install and enable the add-on in your Blender (runs `blender --background`; saves its preferences).
    #[arg(long)]
    install: bool,
    /// The Blender executable for --install [default: $BLENDER, else `blender` on PATH].
    #[arg(long, requires = "install")]
    blender_path: Option<PathBuf>,
}

impl BlenderAddon {
    pub(crate) fn run(self) -> anyhow::Result<ExitCode> {
        let blender = self
            .install
            .then(|| Lookup::from_env(self.blender_path.clone()).find())
            .transpose()?;
        let tmp = (self.install && self.out.is_none())
            .then(tempfile_dir)
            .transpose()?;
        let dir = self
            .out
            .clone()
            .or_else(|| tmp.clone())
            .unwrap_or_else(|| PathBuf::from("."));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let zip = dir.join(format!("{MODULE}.zip"));
        write_atomic(&zip, &addon_zip()?).with_context(|| format!("writing {}", zip.display()))?;
        let result = match blender {
            Some(exe) => install(&exe, &zip),
            None => {
                println!("{}", zip.display());
                Ok(())
            }
        };
        if let Some(tmp) = &tmp {
            let _ = std::fs::remove_dir_all(tmp);
        }
        result?;
        Ok(ExitCode::from(EXIT_OK))
    }
}

/// A fresh private folder in the temporary directory.
fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("clipsculpt-addon-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The add-on as zip bytes (stored, not compressed).
fn addon_zip() -> anyhow::Result<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .unix_permissions(0o644);
    for (name, text) in FILES {
        zip.start_file(name, options)?;
        zip.write_all(text.as_bytes())?;
    }
    Ok(zip.finish()?.into_inner())
}

/// Installs and enables `zip` in Blender `exe` and prints where it went.
fn install(exe: &Path, zip: &Path) -> anyhow::Result<()> {
    let out = Command::new(exe)
        .args(["--background", "-noaudio", "--python-exit-code", "1"])
        .args(["--python-expr", INSTALL, "--"])
        .arg(zip)
        .output()
        .with_context(|| format!("running {}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let installed = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CLIPSCULPT_ADDON "));
    match (out.status.success(), installed) {
        (true, Some(dir)) => {
            println!(
                "installed and enabled in {}/{MODULE}",
                dir.trim_end_matches('/')
            );
            println!("Blender: 3D view ▸ sidebar (N) ▸ clipsculpt");
            Ok(())
        }
        _ => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr
                .lines()
                .chain(stdout.lines())
                .rfind(|l| l.contains("Error") || l.contains("error"))
                .unwrap_or("no message");
            bail!(
                "Blender could not install the add-on ({}): {}",
                out.status,
                last.trim()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The zip holds the add-on's package with its bytes unchanged.
    #[test]
    fn the_zip_holds_the_package() -> anyhow::Result<()> {
        let bytes = addon_zip()?;
        let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes))?;
        assert_eq!(zip.len(), FILES.len());
        let mut text = String::new();
        std::io::Read::read_to_string(&mut zip.by_name(FILES[0].0)?, &mut text)?;
        assert_eq!(text, FILES[0].1);
        assert!(text.contains("bl_info") && text.contains("numpy.bool = bool"));
        Ok(())
    }
}
