//! `StateSandbox` against its reference: the same scripts of file operations run on deepagents'
//! own `StateBackend` (tests/state_backend_check.py, in `$AGENTD_DEEPAGENTS_PYTHON`) and on
//! `StateSandbox`, and every result must be the same, error strings included. Scripts are a fixed
//! seed's random walks over paths, contents and patterns chosen to hit the reference's corners:
//! keys that are not paths, line ends Python's `splitlines` knows, binary uploads, include globs,
//! deletes of "directories", reads past the end.
//!
//! Timestamps differ between any two runs, so results are compared with each timestamp replaced by
//! whether it is set; their order still counts (`glob` answers most recent first).

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_host::{BaseSandbox, StateSandbox};
use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_tests::{Need, skip};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};

const SEED: u64 = 0x5747_4154_4521;
const RANDOM_CASES: usize = 400;

const PATHS: &[&str] = &[
    "/a.txt",
    "/b.md",
    "/dir/c.py",
    "/dir/sub/d.txt",
    "/dir/.e.py",
    "/dir",
    "/dir/",
    "/dir/sub",
    "/x",
    "/x/y",
    "/img.png",
    "/doc.pdf",
    "rel.txt",
    "/ü ñ.txt",
    "/",
    "/nope/z.txt",
    "//a.txt",
];
const LS_PATHS: &[&str] = &["/", "", "/dir", "/dir/", "/dir/sub", "/x", "/nope", "dir", "/a.txt", "//"];
const CONTENTS: &[&str] = &[
    "",
    "hello\nworld\n",
    "needle\r\nx\rneedle y",
    "one\x0btwo\x0cthree\x1cfour\u{2028}five\u{85}six needle",
    "needle needle\nneedle",
    "\n\n\n",
    "héllo needle ünï\n",
    "no newline",
    "a\na\na\na\na\nneedle",
    "  \n",
    "tab\tneedle\n",
];
const OLD: &[&str] = &[
    "needle",
    "o",
    "",
    "\n",
    "hello",
    "zzz",
    "needle needle",
    "\r\n",
    "ü",
    "a\n",
    "world",
    "tab",
    "héllo",
    "no newline",
    "x\r",
    "five",
];
const NEW: &[&str] = &["", "NEEDLE", "x\ny", "needle", "é", "\r"];
const GLOBS: &[&str] = &[
    "*",
    "*.txt",
    "**/*.py",
    "**",
    "**/*",
    "*.{txt,md}",
    "dir/*",
    "/dir/*.py",
    "?.txt",
    "[ab]*",
    "**/sub/*",
    "../x",
    "/**/*.txt",
    "",
    "dir/**",
    "*.py",
    ".*",
    "**/.*",
    "[!a]*",
    "{a,b}.*",
    "x/*",
    "/",
    "sub/*.txt",
];
const GLOB_PATHS: &[Option<&str>] =
    &[None, Some("/"), Some("/dir"), Some("/dir/"), Some("/nope"), Some("dir"), Some("/dir/sub")];
const NEEDLES: &[&str] =
    &["needle", "o", "", "é", "needle needle", "\r", "x\rneedle", "zzz", "one", "\u{2028}"];
const GREP_PATHS: &[Option<&str>] =
    &[None, Some("/"), Some("/dir"), Some("/dir/"), Some("/a.txt"), Some("/nope"), Some("dir")];
const INCLUDES: &[Option<&str>] =
    &[None, Some("*.py"), Some("*.{txt,md}"), Some("**/*.txt"), Some("*.txt"), Some("d*"), Some("*.png")];
const MAX_COUNTS: &[Option<i64>] = &[None, None, Some(1), Some(2), Some(0), Some(-1)];
const BINARY: &[&[u8]] = &[b"\xff\xfe\x00", b"\x89PNG\r\n\x1a\n", b"caf\xe9"];

/// Half the paths an operation names come from these, so edits and reads find what was written.
const HOT: &[&str] = &["/a.txt", "/dir/c.py", "/dir/sub/d.txt"];

fn pick<'a, T>(rng: &mut StdRng, items: &'a [T]) -> &'a T {
    items.choose(rng).unwrap()
}

fn path(rng: &mut StdRng) -> &'static str {
    let items = if rng.random_bool(0.5) { HOT } else { PATHS };
    items.choose(rng).copied().unwrap()
}

fn random_op(rng: &mut StdRng) -> Value {
    match rng.random_range(0..100) {
        0..20 => json!({"verb": "write", "path": path(rng), "content": pick(rng, CONTENTS)}),
        20..28 => {
            let files: Vec<Value> = (0..rng.random_range(1..=3))
                .map(|_| {
                    let bytes = if rng.random_bool(0.5) {
                        pick(rng, CONTENTS).as_bytes()
                    } else {
                        *pick(rng, BINARY)
                    };
                    json!([path(rng), STANDARD.encode(bytes)])
                })
                .collect();
            json!({"verb": "upload", "files": files})
        }
        28..40 => json!({
            "verb": "edit", "path": path(rng), "old": pick(rng, OLD), "new": pick(rng, NEW),
            "replace_all": rng.random_bool(0.5),
        }),
        40..55 => json!({
            "verb": "read", "path": path(rng),
            "offset": pick(rng, &[-3, -1, 0, 0, 1, 2, 3, 5, 100]),
            "limit": pick(rng, &[-1, 0, 1, 2, 3, 2000, 2000]),
        }),
        55..65 => json!({"verb": "ls", "path": pick(rng, LS_PATHS)}),
        65..77 => json!({"verb": "glob", "pattern": pick(rng, GLOBS), "path": pick(rng, GLOB_PATHS)}),
        77..90 => json!({
            "verb": "grep", "pattern": pick(rng, NEEDLES), "path": pick(rng, GREP_PATHS),
            "glob": pick(rng, INCLUDES), "max_count": pick(rng, MAX_COUNTS),
        }),
        90..95 => json!({"verb": "delete", "path": path(rng)}),
        _ => {
            let paths: Vec<&str> = (0..rng.random_range(1..=3)).map(|_| path(rng)).collect();
            json!({"verb": "download", "paths": paths})
        }
    }
}

/// Hand-written scripts for what a random walk reaches rarely: a key rewritten after its delete
/// (write order), a "directory" deleted with its keys, every line end in one file.
fn fixed_cases() -> Vec<Vec<Value>> {
    let write = |path: &str, content: &str| json!({"verb": "write", "path": path, "content": content});
    let grep_all = json!({"verb": "grep", "pattern": "needle"});
    vec![
        vec![
            write("/b.txt", "needle b"),
            write("/a.txt", "needle a"),
            json!({"verb": "delete", "path": "/b.txt"}),
            write("/b.txt", "needle b again"),
            write("/a.txt", "needle a again"),
            grep_all.clone(),
            json!({"verb": "glob", "pattern": "*.txt"}),
        ],
        vec![
            write("/d/x/1.py", "needle"),
            write("/d/x/2.py", "needle"),
            write("/d/y.py", "needle"),
            write("/dx.py", "needle"),
            json!({"verb": "delete", "path": "/d/x/"}),
            json!({"verb": "ls", "path": "/d"}),
            json!({"verb": "delete", "path": "/d"}),
            json!({"verb": "ls", "path": "/"}),
            json!({"verb": "delete", "path": "/d"}),
            grep_all,
        ],
        vec![
            write("/lines.txt", "a\nb\r\nc\rd\x0be\x0cf\x1cg\x1dh\x1ei\u{85}j\u{2028}k\u{2029}l"),
            json!({"verb": "read", "path": "/lines.txt", "offset": 0, "limit": 2000}),
            json!({"verb": "read", "path": "/lines.txt", "offset": 3, "limit": 4}),
            json!({"verb": "grep", "pattern": "e"}),
            json!({"verb": "edit", "path": "/lines.txt", "old": "\r", "new": "", "replace_all": true}),
            json!({"verb": "read", "path": "/lines.txt", "offset": 0, "limit": 2000}),
        ],
    ]
}

/// One operation on the sandbox, as the reference script reports it.
async fn run(sandbox: &StateSandbox, op: &Value) -> Value {
    match op["verb"].as_str().unwrap() {
        "upload" => {
            let files: Vec<(String, Vec<u8>)> = op["files"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    (f[0].as_str().unwrap().to_owned(), STANDARD.decode(f[1].as_str().unwrap()).unwrap())
                })
                .collect();
            serde_json::to_value(sandbox.upload_files(&files).await.unwrap()).unwrap()
        }
        "download" => {
            let paths: Vec<String> = serde_json::from_value(op["paths"].clone()).unwrap();
            let responses = sandbox.download_files(&paths).await.unwrap();
            responses
                .into_iter()
                .map(|r| json!({"path": r.path, "content": r.content.map(|c| STANDARD.encode(c)), "error": r.error}))
                .collect()
        }
        _ => {
            let request: FsRequest = serde_json::from_value(op.clone()).unwrap();
            let response = sandbox.fs(request).await.unwrap();
            let result = match response {
                FsResponse::Ls(r) => serde_json::to_value(r),
                FsResponse::Read(r) => serde_json::to_value(r),
                FsResponse::Write(r) => serde_json::to_value(r),
                FsResponse::Edit(r) => serde_json::to_value(r),
                FsResponse::Glob(r) => serde_json::to_value(r),
                FsResponse::Grep(r) => serde_json::to_value(r),
                FsResponse::Delete(r) => serde_json::to_value(r),
            };
            result.unwrap()
        }
    }
}

/// Each timestamp replaced by whether it is set; `file_data`'s own timestamps dropped (the
/// protocol's `FileData` carries content and encoding only).
fn untimed(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(Value::Object(data)) = map.get_mut("file_data") {
                data.remove("created_at");
                data.remove("modified_at");
            }
            for (key, field) in map.iter_mut() {
                if key == "modified_at" || key == "created_at" {
                    *field = json!(field.as_str().is_some_and(|t| !t.is_empty()));
                } else {
                    untimed(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(untimed),
        _ => {}
    }
}

/// Whether a result says the operation did something: no error, and something found or stored.
fn succeeded(result: &Value) -> bool {
    match result {
        Value::Array(items) => items.iter().any(|r| r["error"].is_null()),
        Value::Object(map) => {
            map.get("error").is_none_or(Value::is_null)
                && ["entries", "matches"]
                    .iter()
                    .all(|k| map.get(*k).is_none_or(|v| v.as_array().is_some_and(|a| !a.is_empty())))
                && map.get("file_data").is_none_or(|d| d["content"].as_str().is_some_and(|c| !c.is_empty()))
        }
        _ => false,
    }
}

async fn reference(python: &std::ffi::OsStr, cases: &[Vec<Value>]) -> Vec<Vec<Value>> {
    use tokio::io::AsyncWriteExt as _;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("state_backend_check.py");
    let mut child = tokio::process::Command::new(python)
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run python");
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(&serde_json::to_vec(cases).unwrap()).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(Duration::from_secs(300), child.wait_with_output())
        .await
        .expect("the reference script finishes")
        .unwrap();
    assert!(
        output.status.success(),
        "the reference script failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[tokio::test]
async fn state_sandbox_answers_as_deepagents_state_backend() {
    let Some(python) = std::env::var_os("AGENTD_DEEPAGENTS_PYTHON") else {
        skip(Need::Deepagents, "AGENTD_DEEPAGENTS_PYTHON is not set (.ci/run installs deepagents in a venv)");
        return;
    };
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut cases = fixed_cases();
    cases.extend((0..RANDOM_CASES).map(|_| {
        // Each walk starts from the hot paths written, so that more than the not-found paths are reached.
        let mut ops: Vec<Value> = HOT
            .iter()
            .map(|p| json!({"verb": "write", "path": p, "content": pick(&mut rng, CONTENTS)}))
            .collect();
        let len = rng.random_range(5..=30);
        ops.extend((0..len).map(|_| random_op(&mut rng)));
        ops
    }));
    let expected = reference(&python, &cases).await;
    assert_eq!(expected.len(), cases.len());

    let mut differences = Vec::new();
    // Per verb: operations run, and how many of them did something (so the walk is known to reach
    // past the error paths).
    let mut reached: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
    for (c, (ops, want)) in cases.iter().zip(&expected).enumerate() {
        let sandbox = StateSandbox::new();
        assert_eq!(want.len(), ops.len());
        for (o, (op, want)) in ops.iter().zip(want).enumerate() {
            let mut got = run(&sandbox, op).await;
            let mut want = want.clone();
            untimed(&mut got);
            untimed(&mut want);
            let counts = reached.entry(op["verb"].as_str().unwrap().to_owned()).or_default();
            counts.0 += 1;
            counts.1 += usize::from(succeeded(&want));
            if got != want {
                differences.push(format!("case {c} op {o}: {op}\n  deepagents: {want}\n  agentd:     {got}"));
            }
        }
    }
    eprintln!("operations run (verb: total, did something): {reached:?}");
    let total: usize = reached.values().map(|(n, _)| n).sum();
    assert!(
        differences.is_empty(),
        "{} of {total} results differ from deepagents' StateBackend; the first ones:\n{}",
        differences.len(),
        differences.iter().take(15).cloned().collect::<Vec<_>>().join("\n")
    );
    for (verb, (_, did)) in &reached {
        assert!(*did > 0, "no {verb} did anything: the scripts do not reach past its errors");
    }
}
