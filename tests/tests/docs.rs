//! The docs stay true to the tree: every crate's map (the root file's `//!` doc) names each module the
//! root declares, every link of the Markdown docs between sections and files resolves, and the
//! README names every `--sandbox` form agentctl parses.

// Test helpers outside #[test] functions: a failed read aborts the test with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_owned()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of the `mod NAME;` declarations (any visibility) of a Rust file; inline modules
/// (`mod tests { … }`) are not files of the crate's map.
fn declared_modules(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("pub ").or_else(|| line.strip_prefix("pub(crate) ")).unwrap_or(line);
            line.strip_prefix("mod ")?.strip_suffix(';').map(str::to_owned)
        })
        .collect()
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
        for module in declared_modules(&source) {
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
    // The README alone links to a dozen sections.
    assert!(checked > 12, "only {checked} links found");
    assert!(broken.is_empty(), "links that lead nowhere:\n{}", broken.join("\n"));
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
fn the_readme_names_every_sandbox_form_agentctl_parses() {
    let readme = read(&workspace().join("README.md"));
    // The comment of "From the shell" lists them, wrapped over `# ` lines: joined, as one text.
    let shell: String =
        readme.lines().filter_map(|line| line.strip_prefix("# ")).collect::<Vec<_>>().join(" ");
    let forms = agentd_host::provider::spec_forms();
    let forms: Vec<&str> = forms.split(", ").collect();
    assert!(forms.len() >= 7, "{forms:?}");
    let missing: Vec<&&str> = forms.iter().filter(|form| !shell.contains(**form)).collect();
    assert!(missing.is_empty(), "--sandbox forms missing from README's \"From the shell\": {missing:?}");
}
