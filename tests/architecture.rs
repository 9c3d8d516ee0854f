//! `docs/ARCHITECTURE.md` stays true of the tree: its crate graph (the block after "Dependencies
//! point one way") names exactly the workspace dependencies of every crate's `Cargo.toml`
//! (`[dependencies]`, optional ones included), its tree of crates names every workspace member
//! by directory and package, and every repository path it names (`crates/...`, `kernels/...`,
//! `src/...`, ...; globs such as `kernels/*.cu` must match a file) exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn architecture() -> String {
    read(&root().join("docs/ARCHITECTURE.md"))
}

/// The workspace members' directories (`Cargo.toml`'s `workspace.members`).
fn members() -> Vec<String> {
    let top: toml::Value = toml::from_str(&read(&root().join("Cargo.toml"))).unwrap();
    top["workspace"]["members"]
        .as_array()
        .expect("workspace.members")
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect()
}

/// The package name and the workspace crates (`vortex-*`, without the prefix) among the
/// `[dependencies]` of the manifest in `dir`.
fn manifest(dir: &Path) -> (String, BTreeSet<String>) {
    let m: toml::Value = toml::from_str(&read(&dir.join("Cargo.toml"))).unwrap();
    let name = m["package"]["name"].as_str().unwrap().to_string();
    let deps = m
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|t| {
            t.keys()
                .filter_map(|k| k.strip_prefix("vortex-").map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (name, deps)
}

/// The short name the graph uses for a package: `vortex-fmm` -> `fmm`, `vortex` -> `vortex`,
/// `vortex-python` -> `python`.
fn short(package: &str) -> String {
    package
        .strip_prefix("vortex-")
        .unwrap_or(package)
        .to_string()
}

/// The names in a list of the graph (`fmm, domain, gpu (feature `cuda`)`): words outside
/// parentheses.
fn names(list: &str) -> BTreeSet<String> {
    let mut out = String::new();
    let mut depth = 0;
    for c in list.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The crate graph of the document: crate -> the crates it depends on. `vortex -> every crate`
/// stands for every library crate of the workspace but the Python bindings.
fn documented_graph(doc: &str) -> BTreeMap<String, BTreeSet<String>> {
    let start = doc
        .find("Dependencies point one way")
        .expect("ARCHITECTURE.md: the paragraph \"Dependencies point one way\"");
    let block = doc[start..]
        .split("```")
        .nth(1)
        .expect("ARCHITECTURE.md: the crate graph's code block");
    let mut graph = BTreeMap::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        for part in line.split(";   ") {
            if let Some((from, _)) = part.split_once("<-") {
                graph.insert(from.trim().to_string(), BTreeSet::new());
            } else if let Some((from, to)) = part.split_once("->") {
                let from = names(from).into_iter().next().expect("a crate before ->");
                graph.insert(from, names(to));
            } else {
                panic!("ARCHITECTURE.md: a line of the crate graph without -> or <-: {line:?}");
            }
        }
    }
    graph
}

#[test]
fn the_crate_graph_is_the_manifests() {
    let doc = architecture();
    let documented = documented_graph(&doc);
    let mut actual = BTreeMap::new();
    let mut libraries = BTreeSet::new();
    for dir in members() {
        let (package, deps) = manifest(&root().join(&dir));
        let name = short(&package);
        if name != "python" {
            libraries.insert(name.clone());
        }
        actual.insert(name, deps);
    }
    let (_, top) = manifest(&root());
    actual.insert("vortex".to_string(), top);
    let mut documented = documented;
    if documented.get("vortex").map(|d| d.contains("every crate")) == Some(true) {
        documented.insert("vortex".to_string(), libraries);
    }
    for (name, deps) in &actual {
        let doc_deps = documented.get(name).unwrap_or_else(|| {
            panic!("ARCHITECTURE.md: crate {name} is missing from the crate graph")
        });
        assert_eq!(
            doc_deps, deps,
            "ARCHITECTURE.md: the crate graph's line of {name} (left) differs from its Cargo.toml \
             (right)"
        );
    }
    for name in documented.keys() {
        assert!(
            actual.contains_key(name),
            "ARCHITECTURE.md: the crate graph names {name}, which is no crate of the workspace"
        );
    }
}

#[test]
fn the_tree_of_crates_names_every_member() {
    let doc = architecture();
    for dir in members() {
        let (package, _) = manifest(&root().join(&dir));
        let entry = format!("{dir} ");
        let line = doc
            .lines()
            .find(|l| l.contains(&entry) && l.contains(&format!("({package})")))
            .map(str::to_string);
        let python = dir == "python" && doc.contains(&format!("python/ ({package}"));
        assert!(
            line.is_some() || python,
            "ARCHITECTURE.md: the tree of crates has no line `{dir} ({package})`"
        );
    }
}

/// The repository paths a text names: words starting with a top-level directory of the tree
/// and a slash, up to the first character that cannot be part of a path.
fn named_paths(text: &str) -> BTreeSet<String> {
    let tops: Vec<String> = std::fs::read_dir(root())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != "target")
        .collect();
    let is_path = |c: char| c.is_ascii_alphanumeric() || "_-./*".contains(c);
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices('/') {
        let start = text[..i].rfind(|c: char| !is_path(c)).map_or(0, |k| k + 1);
        let end = text[i..]
            .find(|c: char| !is_path(c))
            .map_or(text.len(), |k| i + k);
        let word = text[start..end].trim_end_matches('.');
        let first = word.split('/').next().unwrap_or("");
        if start > 0 && text[..start].ends_with("::") {
            continue;
        }
        if tops.iter().any(|t| t == first) && word.len() > first.len() + 1 {
            out.insert(word.to_string());
        }
    }
    out
}

/// Whether `pattern` (a path, possibly with `*` in its last component) names something.
fn exists(pattern: &str) -> bool {
    let path = root().join(pattern.trim_end_matches('/'));
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    if !name.contains('*') {
        return path.exists();
    }
    let (prefix, suffix) = name.split_once('*').unwrap();
    std::fs::read_dir(path.parent().unwrap())
        .map(|d| {
            d.filter_map(|e| e.ok()).any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(prefix) && n.ends_with(suffix.trim_start_matches('*'))
            })
        })
        .unwrap_or(false)
}

#[test]
fn every_path_it_names_exists() {
    let doc = architecture();
    let paths = named_paths(&doc);
    assert!(
        paths.len() > 20,
        "ARCHITECTURE.md names only {} paths: the path reader is broken",
        paths.len()
    );
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !p.starts_with("crates/X") && !exists(p))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names paths that are not in the tree: {missing:?}"
    );
}

#[test]
fn the_path_reader_finds_paths_and_refuses_invented_ones() {
    let text = "see `crates/fmm/src/far.rs` and (kernels/*.cu), not vortex_fmm::crates/x; \
                crates/fmm/src/nowhere.rs.";
    let found = named_paths(text);
    assert!(found.contains("crates/fmm/src/far.rs"), "{found:?}");
    assert!(found.contains("kernels/*.cu"), "{found:?}");
    assert!(found.contains("crates/fmm/src/nowhere.rs"), "{found:?}");
    assert!(exists("crates/fmm/src/far.rs") && exists("kernels/*.cu"));
    assert!(!exists("crates/fmm/src/nowhere.rs") && !exists("kernels/*.nothing"));
    let graph = documented_graph(
        "Dependencies point one way\n```\nfmm <- (nothing)\ngpu -> fmm, cuda (feature `x`)\n```",
    );
    assert_eq!(graph["fmm"], BTreeSet::new());
    assert_eq!(
        graph["gpu"],
        ["cuda", "fmm"].iter().map(|s| s.to_string()).collect()
    );
}
