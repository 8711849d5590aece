//! The prior's held-out split as world data: which combinations a toy prior's training set left
//! out, read from `shap_e/held_out.txt` beside it (written by `train-toy`) or the embedded
//! default's [`HELD_OUT`].

use crate::caption::parse_caption;
use crate::world::{Colour, Shape, HELD_OUT};

/// The file beside a toy prior (`shap_e/held_out.txt`) that lists the combinations its training
/// set left out, one canonical caption per line; without it, [`HELD_OUT`].
pub const HELD_OUT_FILE: &str = "held_out.txt";

/// The held-out split of the toy pipeline in `shap_e_dir`: its [`HELD_OUT_FILE`], else
/// [`HELD_OUT`]. A line that names no combination is an error naming it.
pub fn held_out_split(shap_e_dir: &std::path::Path) -> Result<Vec<(Shape, Colour)>, String> {
    let path = shap_e_dir.join(HELD_OUT_FILE);
    if !path.is_file() {
        return Ok(HELD_OUT.to_vec());
    }
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    parse_split(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Combinations from captions, one per line or comma-separated (`#` comments skipped).
pub fn parse_split(text: &str) -> Result<Vec<(Shape, Colour)>, String> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| parse_caption(c).ok_or_else(|| format!("{c:?} names no toy shape and colour")))
        .collect()
}
