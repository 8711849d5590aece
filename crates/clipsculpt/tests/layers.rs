//! Imports run downward only. Every top-level module of `src/` sits on one layer (bottom first,
//! as in `docs/architecture.md`, "Layers"); a file may name `crate::m` only for a module `m` on a lower
//! layer, and the files inside one module may not import each other in a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first. Modules on one layer do not import each other. `tests` is the
/// crate's own tests of internals (`#[cfg(test)]`), which may use every module.
const LAYERS: &[&[&str]] = &[
    &["atomic", "device", "kernels"],
    &["autodiff", "weights"],
    &["mesh", "clip", "shap_e", "models", "blender", "gallery"],
    &["render", "random"],
    &["guide"],
    &["pipeline"],
    &["batch"],
    &["tests"],
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's code without comments (line comments and doc comments).
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => l[..i].to_string(),
            None => l.to_string(),
        })
        .collect()
}

/// The first path segment after each `crate::` / `super::` in `code` (a `{a, b::c}` group gives
/// each of its items' first segments).
fn first_segments(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().last();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut item, mut items) = (0, String::new(), Vec::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(std::mem::take(&mut item));
                        continue;
                    }
                    _ => {}
                }
                if depth == 0 {
                    item.push(c);
                }
            }
            items.push(item);
            out.extend(
                items
                    .iter()
                    .map(|s| ident(s.trim()))
                    .filter(|s| !s.is_empty()),
            );
        } else {
            out.push(ident(rest));
        }
    }
    out
}

fn ident(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Top-level module of a file under `src/` (`src/clip/load.rs` → `clip`); `None` for lib.rs and
/// main.rs.
fn top_module(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    let name = first.trim_end_matches(".rs").to_string();
    (name != "lib" && name != "main").then_some(name)
}

#[test]
fn every_module_has_a_layer_and_imports_only_lower_layers() {
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, l)| l.iter().map(move |m| (*m, i)))
        .collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut violations = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(src()).unwrap();
        let Some(module) = top_module(rel) else {
            continue;
        };
        let Some(&own) = layer_of.get(module.as_str()) else {
            violations.push(format!("src/{module} has no layer in LAYERS"));
            continue;
        };
        let code = code_lines(&std::fs::read_to_string(f).unwrap()).join("\n");
        for target in first_segments(&code, "crate::") {
            if target == module {
                continue;
            }
            match layer_of.get(target.as_str()) {
                Some(&t) if t < own => {}
                Some(&t) => violations.push(format!(
                    "{} (layer {own}) imports crate::{target} (layer {t})",
                    rel.display()
                )),
                None => violations.push(format!(
                    "{} imports crate::{target}, which has no layer",
                    rel.display()
                )),
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

/// Files of one module that import each other in a circle (through `super::` and
/// `crate::<module>::`), ignoring the `mod.rs` faces that re-export their children.
#[test]
fn no_circles_inside_a_module() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    // Node: a file (or folder module) other than mod.rs, by its path without extension.
    let node = |p: &Path| -> Option<PathBuf> {
        if p.file_name()? == "mod.rs" {
            return None;
        }
        Some(p.with_extension(""))
    };
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for f in &files {
        let Some(from) = node(f) else { continue };
        let parent = f.parent().unwrap().to_path_buf();
        let text = std::fs::read_to_string(f).unwrap();
        // `super::` inside a `mod tests { .. }` block means this file: read up to the tests.
        let head = text.split("#[cfg(test)]").next().unwrap_or("");
        let code = code_lines(head).join("\n");
        let rel_parent = parent.strip_prefix(src()).unwrap().to_path_buf();
        let own_path = format!(
            "crate::{}::",
            rel_parent.to_string_lossy().replace('/', "::")
        );
        let mut targets = first_segments(&code, "super::");
        if !rel_parent.as_os_str().is_empty() {
            targets.extend(first_segments(&code, &own_path));
        }
        for t in targets {
            let as_file = parent.join(format!("{t}.rs"));
            let as_dir = parent.join(&t);
            let to = if as_file.is_file() || as_dir.join("mod.rs").is_file() {
                parent.join(&t)
            } else {
                continue;
            };
            if to != from {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        n: &PathBuf,
        edges: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        state: &mut BTreeMap<PathBuf, u8>,
        stack: &mut Vec<PathBuf>,
        circles: &mut Vec<String>,
    ) {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in edges.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                0 => visit(m, edges, state, stack, circles),
                1 => {
                    let start = stack.iter().position(|s| s == m).unwrap_or(0);
                    let names: Vec<String> = stack[start..]
                        .iter()
                        .chain(std::iter::once(m))
                        .map(|p| p.strip_prefix(src()).unwrap().display().to_string())
                        .collect();
                    circles.push(names.join(" -> "));
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
    }
    let mut state = BTreeMap::new();
    let mut circles = Vec::new();
    for n in edges.keys() {
        if !state.contains_key(n) {
            visit(n, &edges, &mut state, &mut Vec::new(), &mut circles);
        }
    }
    assert!(circles.is_empty(), "circles:\n{}", circles.join("\n"));
}

/// The checker itself: grouped imports and nested groups are read item by item.
/// The workspace's crates depend downward only: the application (`crates/clipsculpt-cli`) and the
/// lab (`lab`) on the library, the library on neither; and neither of them names a private path
/// of the library (`clipsculpt::…::` items are public by construction, so this checks the
/// manifests and that no one reaches into the library's source with `#[path]`).
#[test]
fn crates_depend_downward_only() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let manifest = |rel: &str| std::fs::read_to_string(root.join(rel).join("Cargo.toml")).unwrap();
    let deps = |text: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut in_deps = false;
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with('[') {
                in_deps = l.contains("dependencies");
            } else if in_deps {
                if let Some((name, _)) = l.split_once(['=', '.']) {
                    out.push(name.trim().to_string());
                }
            }
        }
        out
    };
    let lib = deps(&manifest("crates/clipsculpt"));
    assert!(
        !lib.iter().any(|d| d.starts_with("clipsculpt")),
        "the library depends on {lib:?}"
    );
    for app in ["crates/clipsculpt-cli", "lab"] {
        let d = deps(&manifest(app));
        assert!(d.contains(&"clipsculpt".to_string()), "{app}: {d:?}");
        let others: Vec<&String> = d.iter().filter(|n| n.starts_with("clipsculpt-")).collect();
        assert!(others.is_empty(), "{app} depends on {others:?}");
        let mut files = Vec::new();
        rust_files(&root.join(app).join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("crates/clipsculpt/src"),
                "{} reaches into the library's source",
                f.display()
            );
        }
    }
}

#[test]
fn first_segments_reads_groups() {
    let code = "use crate::{a::{b, c}, d};\nlet x = crate::e::f();\nmy_crate::g;";
    assert_eq!(first_segments(code, "crate::"), vec!["a", "d", "e"]);
}
