//! The page: one self-contained HTML file (inline CSS and script, relative links only) with one card per item.

use std::fmt::Write as _;
use std::path::Path;

use super::assets::VIEWER_FILE;
use super::scan::{Card, CardStatus};

/// The page's style sheet.
const CSS: &str = include_str!("page.css");
/// The page's script: sorting, filtering, the 3D views (and the checks the browser test reads).
const JS: &str = include_str!("page.js");

/// The page of `cards` for the folder `dir`; `meshes[i]` is card `i`'s mesh script, when it has one.
pub(crate) fn render(dir: &Path, cards: &[Card], meshes: &[Option<String>]) -> String {
    let title = match cards {
        [one] if one.folder.is_empty() => one.prompt.clone(),
        _ => dir
            .canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "runs".into()),
    };
    let failed = cards
        .iter()
        .filter(|c| c.status == CardStatus::Failed)
        .count();
    let mut html = String::with_capacity(4096 + 2048 * cards.len());
    let _ = write!(
        html,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{t} · clipsculpt gallery</title><style>{CSS}</style></head>\n\
         <body data-errors=\"0\" data-viewer=\"{ASSETS}/{VIEWER_FILE}\">\n<header class=\"top\"><h1>{t}</h1>\
         <p class=\"counts\">{runs} run(s), {failed} failed · <span id=\"shown\">{all}</span> shown</p>\
         <label>Filter <input id=\"filter\" type=\"search\" placeholder=\"prompt, folder, mode…\"></label> \
         <label>Sort <select id=\"sort\"><option value=\"order\">folder</option>\
         <option value=\"score-desc\">score, best first</option><option value=\"score-asc\">score, worst first</option>\
         <option value=\"seconds-asc\">time, fastest first</option><option value=\"prompt\">prompt</option>\
         </select></label></header>\n<main id=\"cards\">\n",
        t = esc(&title),
        ASSETS = super::ASSETS_DIR,
        runs = cards.len() - failed,
        all = cards.len(),
    );
    for (i, card) in cards.iter().enumerate() {
        card_html(&mut html, i, card, meshes.get(i).and_then(Option::as_deref));
    }
    let _ = write!(html, "</main>\n<script>{JS}</script>\n</body></html>\n");
    html
}

/// Appends the `<article>` of card `i`.
fn card_html(html: &mut String, i: usize, c: &Card, mesh: Option<&str>) {
    let status = match c.status {
        CardStatus::Done => "done",
        CardStatus::NoMesh => "no-mesh",
        CardStatus::Failed => "failed",
    };
    let score = c.scores.map_or(String::new(), |s| format!("{:.6}", s[1]));
    let seconds = c.seconds.map_or(String::new(), |s| format!("{s:.3}"));
    let text = [
        c.prompt.as_str(),
        &c.folder,
        c.mode.as_deref().unwrap_or(""),
        c.command.as_deref().unwrap_or(""),
        status,
    ]
    .join(" ")
    .to_lowercase();
    let _ = write!(
        html,
        "<article class=\"card {status}\" id=\"card-{key}\" data-key=\"{key}\" data-order=\"{i}\" \
         data-score=\"{score}\" data-seconds=\"{seconds}\" data-prompt=\"{p}\" data-text=\"{text}\"{mesh_attr}>\n\
         <h2>{prompt}</h2><p class=\"folder\">{folder}</p>\n",
        key = esc(&c.key),
        p = esc(&c.prompt.to_lowercase()),
        text = esc(&text),
        mesh_attr = mesh.map_or(String::new(), |m| format!(" data-glb=\"{}\"", esc(&url(m)))),
        prompt = if c.prompt.is_empty() {
            "(no prompt)".to_string()
        } else {
            esc(&c.prompt)
        },
        folder = esc(if c.folder.is_empty() { "." } else { &c.folder }),
    );
    if let Some(r) = &c.reason {
        let what = if c.status == CardStatus::Failed {
            "failed"
        } else {
            "no mesh"
        };
        let _ = writeln!(html, "<p class=\"reason\"><b>{what}:</b> {}</p>", esc(r));
    }
    html.push_str("<div class=\"media\">");
    for (file, caption) in &c.images {
        let _ = write!(
            html,
            "<figure><a href=\"{u}\"><img loading=\"lazy\" src=\"{u}\" alt=\"{cap}\"></a><figcaption>{cap}</figcaption></figure>",
            u = esc(&url(file)),
            cap = esc(caption),
        );
    }
    if mesh.is_some() {
        html.push_str(
            "<div class=\"view3d\"><button type=\"button\" class=\"open3d\">3D view</button></div>",
        );
    }
    html.push_str("</div>\n");
    facts(html, c);
    let _ = write!(
        html,
        "<details><summary>files ({})</summary><ul>",
        c.files.len()
    );
    for (file, size) in &c.files {
        let _ = write!(
            html,
            "<li><a href=\"{}\">{}</a> <span class=\"size\">{}</span></li>",
            esc(&url(file)),
            esc(file.rsplit('/').next().unwrap_or(file)),
            human_size(*size)
        );
    }
    html.push_str("</ul></details>\n</article>\n");
}

/// Appends the card's facts (seed, mode, scores, time, parents) as a definition list.
fn facts(html: &mut String, c: &Card) {
    let mut rows: Vec<(&str, String)> = Vec::new();
    if let Some(cmd) = &c.command {
        rows.push(("made by", cmd.clone()));
    }
    if let Some(s) = c.seed {
        rows.push(("seed", s.to_string()));
    }
    if let Some(m) = &c.mode {
        rows.push(("mode", m.clone()));
    }
    if let Some([a, b]) = c.scores {
        rows.push(("held-aside score", format!("{a:.3} → {b:.3}")));
    }
    if let Some([a, b]) = c.held_out {
        rows.push(("held-out CLIP", format!("{a:.3} → {b:.3}")));
    }
    if let Some(m) = c.mesh_score {
        rows.push(("mesh score", format!("{m:.3}")));
    }
    if let Some(s) = c.seconds {
        rows.push(("time", format!("{s:.1} s")));
    }
    if let Some(f) = c.faces {
        rows.push(("faces", f.to_string()));
    }
    for p in &c.parents {
        rows.push(("parent", p.clone()));
    }
    html.push_str("<dl>");
    for (k, v) in rows {
        let _ = write!(html, "<dt>{}</dt><dd>{}</dd>", esc(k), esc(&v));
    }
    html.push_str("</dl>\n");
}

/// A byte count for people.
fn human_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.0} kB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// `text` escaped for HTML text and double-quoted attributes.
pub(crate) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A relative path as a URL path: every byte outside `[A-Za-z0-9._~/-]` percent-encoded (so that no name can turn
/// into a scheme or a query).
pub(crate) fn url(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'~' | b'/' | b'-' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Markup in a prompt stays text; odd folder names stay relative paths.
    #[test]
    fn escapes_text_and_paths() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(url("a b/c:d?.png"), "a%20b/c%3Ad%3F.png");
    }
}
