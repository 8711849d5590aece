//! Running Blender as a child process with a time limit, its output going to a log file.

use std::fs::File;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::error::BlenderError;

/// Runs `cmd` with stdout and stderr appended to `log`; stops it after `timeout`.
/// Returns the exit status and the seconds it ran.
pub(crate) fn run_logged(
    cmd: &mut Command,
    log: &Path,
    timeout: Duration,
) -> Result<(ExitStatus, f64), BlenderError> {
    let out = File::create(log).map_err(BlenderError::io(log))?;
    let err = out.try_clone().map_err(BlenderError::io(log))?;
    let exe = Path::new(cmd.get_program()).to_path_buf();
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|source| BlenderError::Spawn { exe, source })?;
    loop {
        if let Some(status) = child.try_wait().map_err(BlenderError::io(log))? {
            return Ok((status, start.elapsed().as_secs_f64()));
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BlenderError::Timeout {
                seconds: timeout.as_secs(),
                log: log.to_path_buf(),
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The line of Blender's output that best says what went wrong: the script's own message, else the last error
/// line (not the EGL probing noise of headless starts, nor Blender's generic "script failed"), else the last line.
pub(crate) fn telling_line(output: &str) -> String {
    let lines: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("clipsculpt preview:"))
        .or_else(|| {
            lines.iter().rev().find(|l| {
                l.contains("Error")
                    && !l.starts_with("EGL Error")
                    && !l.starts_with("Error: script failed")
            })
        })
        .or(lines.last());
    pick.map_or_else(|| "no output".to_string(), |l| l.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telling_line_prefers_the_script_message_then_real_errors() {
        let out = "Blender 3.4.1\nEGL Error (0x3001): EGL_NOT_INITIALIZED\nclipsculpt preview: x has no mesh\n\
                   Error: script failed, file: 'p.py', exiting.\n";
        assert_eq!(telling_line(out), "clipsculpt preview: x has no mesh");
        let out = "EGL Error (0x3001): bad\nTraceback\nRuntimeError: Error: Build without OpenImageDenoiser\n\
                   Error: script failed, file: 'p.py', exiting.\n";
        assert_eq!(
            telling_line(out),
            "RuntimeError: Error: Build without OpenImageDenoiser"
        );
        assert_eq!(telling_line("a\nb\n\n"), "b");
        assert_eq!(telling_line(""), "no output");
    }

    #[cfg(unix)]
    #[test]
    fn a_process_past_its_limit_is_stopped() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("log");
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo started; sleep 30"]);
        let t = Instant::now();
        let err = run_logged(&mut cmd, &log, Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, BlenderError::Timeout { .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "started\n");
        let (status, _) = run_logged(
            Command::new("sh").args(["-c", "exit 3"]),
            &log,
            Duration::from_secs(10),
        )
        .unwrap();
        assert_eq!(status.code(), Some(3));
    }
}
