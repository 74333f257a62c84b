//! The docs stay true to the tree: every crate's map (the root file's `//!` doc) names each module the
//! root declares, every module file is named by its parent's `//!` doc or its crate's, every link of
//! the Markdown docs (README.md, docs/*.md, protocol/README.md, images/README.md) between sections and
//! files resolves, and docs/agentctl.md names every `--sandbox` form agentctl parses. Links in the
//! crate docs are rustdoc's intra-doc links, which `cargo doc` with warnings denied checks (CI).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed read aborts the test with its message"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agentd_tests::sources::declared_modules;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The crate roots: each library's and binary's root file, the ones whose `//!` doc is a map.
fn crate_roots() -> Vec<PathBuf> {
    let root = workspace();
    let mut roots: Vec<PathBuf> = [
        "agent/src/main.rs",
        "host/src/lib.rs",
        "protocol/src/lib.rs",
        "python/src/lib.rs",
        "tests/src/lib.rs",
        "tests/fakes/src/lib.rs",
    ]
    .iter()
    .map(|p| root.join(p))
    .collect();
    for bins in ["host/src/bin", "tests/src/bin"] {
        for entry in std::fs::read_dir(root.join(bins)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            }
        }
    }
    roots
}

#[test]
fn every_crate_map_names_each_of_its_modules() {
    let mut missing = Vec::new();
    let mut seen = 0;
    for path in crate_roots() {
        let source = read(&path);
        let doc: String = source
            .lines()
            .filter_map(|line| line.trim_start().strip_prefix("//!"))
            .collect::<Vec<_>>()
            .join("\n");
        for module in declared_modules(&source, &path, true).into_iter().map(|d| d.name) {
            seen += 1;
            if !doc.contains(&format!("`{module}`")) {
                missing.push(format!("{}: `{module}`", path.display()));
            }
        }
    }
    // The parse found the modules at all (agentd alone declares more than ten).
    assert!(seen > 30, "only {seen} module declarations found");
    assert!(missing.is_empty(), "modules missing from their crate's `//!` map:\n{}", missing.join("\n"));
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces made hyphens; a repeated
/// heading gets `-1`, `-2`, ….
fn anchors(markdown: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for line in outside_code(markdown) {
        let Some(title) = line.strip_prefix('#') else { continue };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let n = seen.entry(slug.clone()).or_default();
        out.push(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
        *n += 1;
    }
    out
}

/// The lines of a Markdown text outside its fenced code blocks.
fn outside_code(markdown: &str) -> Vec<&str> {
    let mut fenced = false;
    markdown
        .lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The targets of the inline links (`[text](target)`) of a Markdown text, outside code.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in outside_code(markdown) {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
            }
        }
    }
    out
}

#[test]
fn every_markdown_link_resolves() {
    let root = workspace();
    let mut docs: Vec<PathBuf> =
        ["README.md", "protocol/README.md", "images/README.md"].iter().map(|p| root.join(p)).collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        docs.push(entry.unwrap().path());
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        for target in link_targets(&read(doc)) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if file.is_empty() { doc.clone() } else { doc.parent().unwrap().join(file) };
            if !file.exists() {
                broken.push(format!("{}: {target} (no such file)", doc.display()));
            } else if !anchor.is_empty() && !anchors(&read(&file)).iter().any(|a| a == anchor) {
                broken.push(format!("{}: {target} (no such section)", doc.display()));
            }
        }
    }
    // The README alone links to a dozen pages and sections.
    assert!(checked > 12, "only {checked} links found");
    // Each page of docs/ is linked from the README: the front door leads everywhere.
    let readme = read(&root.join("README.md"));
    let unlinked: Vec<String> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".md") && !readme.contains(&format!("](docs/{name}")))
        .collect();
    assert!(unlinked.is_empty(), "docs/ pages the README does not link to: {unlinked:?}");
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
}

/// The paths of the tree that a Markdown text names in backticks (`agent/src/guard.rs`), outside
/// code blocks: those that start at a top-level folder of the workspace.
fn named_paths(markdown: &str) -> Vec<String> {
    const TOP: [&str; 8] = ["agent/", "host/", "protocol/", "tests/", "python/", "images/", "docs/", "fuzz/"];
    let mut out = Vec::new();
    for line in outside_code(markdown) {
        for (n, piece) in line.split('`').enumerate() {
            // Odd pieces are inside backticks.
            let path = piece.split([':', '#', ' ']).next().unwrap_or("");
            // `*`, `<…>`, `{a,b}` and `NAME` stand for many paths.
            let pattern = path.contains(['*', '<', '{']) || path.contains("NAME");
            if n % 2 == 1 && TOP.iter().any(|top| path.starts_with(top)) && !pattern {
                out.push(path.trim_end_matches(['.', ',']).to_owned());
            }
        }
    }
    out
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = workspace();
    let mut docs: Vec<PathBuf> = ["README.md", "protocol/README.md"].iter().map(|p| root.join(p)).collect();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        docs.push(entry.unwrap().path());
    }
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        for path in named_paths(&read(doc)) {
            checked += 1;
            // Build outputs and files the tests make are named too; they live under target/.
            if !root.join(&path).exists() {
                missing.push(format!("{}: `{path}`", doc.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    // The architecture page alone names dozens of files.
    assert!(checked > 30, "only {checked} paths found");
    assert!(missing.is_empty(), "paths the docs name that the tree does not have:\n{}", missing.join("\n"));
}

#[test]
fn anchors_are_githubs() {
    let headings = "# agentd\n## A sandbox you don't trust\n```sh\n# a comment\n```\n### Process walls (measured)\n## `agentd fs` — verbs\n## Limits\n## Limits\n";
    assert_eq!(
        anchors(headings),
        [
            "agentd",
            "a-sandbox-you-dont-trust",
            "process-walls-measured",
            "agentd-fs--verbs",
            "limits",
            "limits-1"
        ]
    );
}

#[test]
fn the_agentctl_page_names_every_sandbox_form_agentctl_parses() {
    let page = read(&workspace().join("docs/agentctl.md"));
    // The comment of its first example lists them, wrapped over `# ` lines: joined, as one text.
    let shell: String = page.lines().filter_map(|line| line.strip_prefix("# ")).collect::<Vec<_>>().join(" ");
    let forms = agentd_host::provider::spec_forms();
    let forms: Vec<&str> = forms.split(", ").collect();
    assert!(forms.len() >= 7, "{forms:?}");
    let missing: Vec<&&str> = forms.iter().filter(|form| !shell.contains(**form)).collect();
    assert!(missing.is_empty(), "--sandbox forms missing from docs/agentctl.md: {missing:?}");
}

/// The crates whose module trees the maps cover: each one's `src/`.
const CRATE_SOURCES: [&str; 6] =
    ["protocol/src", "agent/src", "host/src", "tests/src", "tests/fakes/src", "python/src"];

/// Every `.rs` file below `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// The words inside the backtick spans of a file's `//!` doc: `` `exec` ``, `` [`exec`] ``,
/// `` `exec::tree` ``, `` `exec/tree.rs` `` and `` `exec/{tree,spawn}.rs` `` all name `tree`.
fn named_in_doc(path: &Path) -> Vec<String> {
    let Ok(source) = std::fs::read_to_string(path) else { return Vec::new() };
    let doc: String = source
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    doc.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|span| span.split(|c: char| !(c.is_alphanumeric() || c == '_')))
        .filter(|word| !word.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The file of the module a directory of submodules belongs to: `dir.rs` beside it, else
/// `dir/mod.rs` (for `src/bin/NAME/`, the binary's root `src/bin/NAME.rs` or `src/bin/NAME/main.rs`).
fn module_file_of(dir: &Path) -> PathBuf {
    let beside = dir.with_extension("rs");
    if beside.is_file() {
        return beside;
    }
    let main = dir.join("main.rs");
    if main.is_file() { main } else { dir.join("mod.rs") }
}

/// The module maps below the crate roots. The rule: every module file of a crate (`NAME.rs`, or
/// `NAME/mod.rs`, below `src/`) is named, in backticks, in the `//!` doc of its parent module's file
/// or of its crate root (`lib.rs`, `main.rs`, or for a binary's modules its `src/bin/` file). Crate
/// roots themselves (`lib.rs`, `main.rs`, the files of `src/bin/`) are not modules. A file is named
/// when one of the words inside a backtick span of that doc is its module's name (see
/// [`named_in_doc`]); so a newcomer finds any module from its crate's map in at most two hops.
#[test]
fn every_module_is_named_by_its_parent_or_its_crate_root() {
    let root = workspace();
    let mut missing = Vec::new();
    let mut seen = 0;
    for crate_src in CRATE_SOURCES {
        let src = root.join(crate_src);
        let lib = if src.join("lib.rs").is_file() { src.join("lib.rs") } else { src.join("main.rs") };
        let bin = src.join("bin");
        for file in rust_files(&src) {
            let dir = file.parent().unwrap().to_owned();
            let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
            // A crate root: the library's (`lib.rs`), a binary's (`main.rs`, or a file of src/bin/).
            if stem == "main" || dir == bin || (dir == src && stem == "lib") {
                continue;
            }
            // `NAME/mod.rs` is the module NAME of the directory above.
            let (name, home) = if stem == "mod" {
                (dir.file_name().unwrap().to_string_lossy().into_owned(), dir.parent().unwrap().to_owned())
            } else {
                (stem, dir)
            };
            let parent = if home == src { lib.clone() } else { module_file_of(&home) };
            // The crate root: a binary's (the first directory below src/bin/), else the library's.
            let crate_root = match home.strip_prefix(&bin).ok().and_then(|rest| rest.components().next()) {
                Some(first) => module_file_of(&bin.join(first)),
                None => lib.clone(),
            };
            seen += 1;
            if ![parent, crate_root].iter().any(|doc| named_in_doc(doc).contains(&name)) {
                missing.push(format!("{}: `{name}`", file.strip_prefix(&root).unwrap().display()));
            }
        }
    }
    // The walk found the modules at all (agentd alone has more than forty).
    assert!(seen > 100, "only {seen} module files found");
    assert!(
        missing.is_empty(),
        "module files named neither by their parent's `//!` doc nor by their crate root's:\n{}",
        missing.join("\n")
    );
}
