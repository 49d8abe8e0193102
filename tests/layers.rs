//! The library's layers, read from its source (issue 16, item 7): no
//! import circles between top-level modules or between files, and the
//! CUDA and decode layers import nothing from the pipeline or the device
//! stage they serve.
//!
//! An import is any `crate::`, `super::` or `self::` path outside comments
//! and `#[cfg(test)] mod tests`, resolved to the deepest module it names.
//! A file naming its own ancestors does not count: a child reaching its
//! parent's items is how Rust's module tree shares them, and the parent
//! declares the child, so every such pair would read as a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

/// Every module of the library (`src/bin` is the CLI, not the library),
/// with the file it lives in.
fn modules() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut BTreeMap<Module, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("bin") {
                    walk(&path, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix("src").unwrap().with_extension("");
            let mut m: Module = rel.iter().map(|c| c.to_string_lossy().into()).collect();
            if m.last().is_some_and(|l| l == "mod" || l == "lib") {
                m.pop();
            }
            out.insert(m, std::fs::read_to_string(&path).unwrap());
        }
    }
    let mut out = BTreeMap::new();
    walk(Path::new("src"), &mut out);
    out
}

/// The code of a file without comments and its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a file's code names from `crate`, `super` or `self`, as
/// segments; `a::{b, c::d}` gives `a::b` and `a::c` (one brace level).
fn paths(code: &str) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !ident(bytes[i - 1]);
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| rest.starts_with(h));
        let Some(head) = head.filter(|_| starts_word) else {
            i += 1;
            continue;
        };
        let mut segs = vec![head.trim_end_matches("::").to_string()];
        i += head.len();
        loop {
            let start = i;
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            if i > start {
                segs.push(bytes[start..i].iter().collect());
            }
            if bytes.get(i) == Some(&':') && bytes.get(i + 1) == Some(&':') {
                i += 2;
                continue;
            }
            break;
        }
        if bytes.get(i) == Some(&'{') {
            let end = bytes[i..]
                .iter()
                .position(|&c| c == '}')
                .map_or(bytes.len(), |p| i + p);
            let inner: String = bytes[i + 1..end].iter().collect();
            for item in inner.split(',') {
                let first: String = item.trim().chars().take_while(|&c| ident(c)).collect();
                if !first.is_empty() {
                    let mut p = segs.clone();
                    p.push(first);
                    out.push(p);
                }
            }
            i = end;
        }
        out.push(segs);
    }
    out
}

/// The module a path from `from` names: the deepest existing module along
/// it.
fn resolve(from: &Module, path: &[String], mods: &BTreeMap<Module, String>) -> Option<Module> {
    let mut base = match path[0].as_str() {
        "crate" => Vec::new(),
        _ => from.clone(),
    };
    let mut rest = &path[1..];
    if path[0] == "super" {
        base.pop();
        while rest.first().is_some_and(|s| s == "super") {
            base.pop();
            rest = &rest[1..];
        }
    }
    (0..=rest.len()).rev().find_map(|n| {
        let mut m = base.clone();
        m.extend(rest[..n].iter().cloned());
        mods.contains_key(&m).then_some(m)
    })
}

/// Each file's imports of other files, ancestors left out.
fn file_edges(mods: &BTreeMap<Module, String>) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut edges = BTreeMap::new();
    for (m, text) in mods {
        let to: BTreeSet<Module> = paths(&code(text))
            .iter()
            .filter_map(|p| resolve(m, p, mods))
            .filter(|t| t != m && !m.starts_with(t))
            .collect();
        edges.insert(m.clone(), to);
    }
    edges
}

/// The node a module belongs to in the top-level graph: its top-level
/// module, with `decode::nvjpeg` a node of its own (the GPU decoder, which
/// sits above `cuda` while the CPU decoders sit below it).
fn top(m: &Module) -> String {
    match m.as_slice() {
        [d, n, ..] if d == "decode" && n == "nvjpeg" => "decode::nvjpeg".into(),
        [] => "lib".into(),
        [t, ..] => t.clone(),
    }
}

/// A cycle in `edges`, if any, as the nodes along it.
fn cycle<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    // 0 unseen, 1 on the current path, 2 done.
    fn visit<N: Ord + Clone>(
        n: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        state: &mut BTreeMap<N, u8>,
        path: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        state.insert(n.clone(), 1);
        path.push(n.clone());
        for t in edges.get(n).into_iter().flatten() {
            match state.get(t).copied().unwrap_or(0) {
                1 => {
                    let at = path.iter().position(|p| p == t).unwrap();
                    let mut c = path[at..].to_vec();
                    c.push(t.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(t, edges, state, path) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in edges.keys() {
        if state.get(n).copied().unwrap_or(0) == 0
            && let Some(c) = visit(n, edges, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_reader_sees_the_imports() {
    let p = paths("use crate::a::{b, c::d};\nlet x = super::super::e::f(1);\nfoo_self::g");
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        p,
        vec![
            s(&["crate", "a", "b"]),
            s(&["crate", "a", "c"]),
            s(&["crate", "a"]),
            s(&["super", "super", "e", "f"]),
        ]
    );
    let mods = modules();
    let from: Module = s(&["stage", "cuda"]);
    assert_eq!(
        resolve(&from, &s(&["super", "handoff", "Jpeg"]), &mods),
        Some(s(&["stage", "handoff"]))
    );
    assert_eq!(
        resolve(
            &from,
            &s(&["crate", "decode", "nvjpeg", "route", "Share"]),
            &mods
        ),
        Some(s(&["decode", "nvjpeg", "route"]))
    );
}

#[test]
fn no_import_circles_between_files() {
    let edges = file_edges(&modules());
    assert!(edges.len() > 50, "only {} files read", edges.len());
    if let Some(c) = cycle(&edges) {
        let c: Vec<_> = c.iter().map(|m| m.join("::")).collect();
        panic!("files import each other in a circle: {}", c.join(" -> "));
    }
}

#[test]
fn no_import_circles_between_modules() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in file_edges(&modules()) {
        let entry = graph.entry(top(&from)).or_default();
        entry.extend(to.iter().map(top).filter(|t| *t != top(&from)));
    }
    // The crate root re-exports the public types: it sits above all.
    graph.remove("lib");
    if let Some(c) = cycle(&graph) {
        panic!("modules import each other in a circle: {}", c.join(" -> "));
    }
    let listed: Vec<String> = graph
        .iter()
        .map(|(m, to)| {
            format!(
                "{m} -> {}",
                to.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    println!("module graph:\n  {}", listed.join("\n  "));
}

#[test]
fn the_gpu_layers_import_nothing_they_serve() {
    for (from, to) in file_edges(&modules()) {
        if !matches!(top(&from).as_str(), "cuda" | "decode" | "decode::nvjpeg") {
            continue;
        }
        for t in to {
            assert!(
                !matches!(top(&t).as_str(), "pipeline" | "stage" | "interop"),
                "{} imports {}",
                from.join("::"),
                t.join("::")
            );
        }
    }
}
