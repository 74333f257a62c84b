//! What path permissions and allowed programs cost: prints figures, asserts nothing (every ratio is
//! against a baseline measured in the same run, in turns).
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench permissions
//! ```
//!
//! Three embedded-default sandboxes over the same tree (`src/` of 200 files in 20 directories,
//! 10,000 files in `deps/`): one without rules, one with 20 plain-prefix rules (deny and allow, read
//! and write, nested), one with the same 20 rules and `allowed_commands` of 5 programs. It prints:
//! 1. the round trip of `exec true` on each (median, p99; the rulesets are built once and reused);
//! 2. the worst case for the ruleset: a per-exec deny rule that differs every time, so every command
//!    builds its ruleset (carve-outs, program resolution), against the same exec with no override;
//! 3. the worst case for a pattern rule (`**/*.env`, not a plain prefix): it is looked for in the
//!    whole tree (10,200 files) before every command;
//! 4. a verb's cost with and without the 20 rules: `read` of a small file, `write` of one in an
//!    allowed island inside a write-denied subtree, `ls` of a 200-entry
//!    directory, `glob **/*.py` and `grep` over `src/` (the rules are checked on every result).
//!
//! Uses the static agentd at `target/x86_64-unknown-linux-gnu/release/agentd` when it exists, else
//! `target/release/agentd`.

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::path::Path;
use std::time::{Duration, Instant};

use agentd_host::adapters::local::LocalOptions;
use agentd_host::{AgentdSandbox, BaseSandbox, LocalSandbox};
use agentd_protocol::ExecRequest;
use agentd_protocol::permission::{Operation, PermissionMode, PermissionRule};
use agentd_protocol::profile::ProfileOverride;
use agentd_tests::stats::percentile;

const ROUNDS: usize = 300;
const COLD_ROUNDS: usize = 100;
const VERB_ROUNDS: usize = 200;

fn main() {
    let agentd = agentd_tests::bench_agentd();
    // SAFETY: set before any thread starts.
    unsafe { std::env::set_var("AGENTD_BIN", &agentd) };
    println!("agentd: {}", agentd.display());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

/// `src/` of 200 files in 20 directories, `deps/` of 10,000 files in 100, and `secret/`.
fn make_tree(root: &Path) {
    for d in 0..20 {
        let dir = root.join(format!("src/m{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..10 {
            std::fs::write(dir.join(format!("f{f}.py")), format!("import os\nneedle = {d}{f}\n")).unwrap();
        }
    }
    for d in 0..100 {
        let dir = root.join(format!("deps/p{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            std::fs::write(dir.join(format!("f{f}.txt")), "x\n").unwrap();
        }
    }
    std::fs::create_dir_all(root.join("secret")).unwrap();
    std::fs::write(root.join("secret/key"), "k\n").unwrap();
    std::fs::create_dir_all(root.join("flat")).unwrap();
    for f in 0..200 {
        std::fs::write(root.join(format!("flat/e{f:03}")), "").unwrap();
    }
}

fn rule(mode: PermissionMode, ops: &[Operation], path: String) -> PermissionRule {
    PermissionRule { operations: ops.to_vec(), paths: vec![path], mode }
}

/// 20 plain-prefix rules over the tree, nested the way a real list is: allowed islands inside
/// denied subtrees, reads and writes.
fn twenty_rules(root: &Path) -> Vec<PermissionRule> {
    use Operation::{Read, Write};
    use PermissionMode::{Allow, Deny};
    let r = |rel: &str| format!("{}/{rel}", root.display());
    let mut rules = Vec::new();
    for d in 0..5 {
        rules.push(rule(Allow, &[Write], r(&format!("src/m{d:02}/**"))));
    }
    rules.push(rule(Deny, &[Write], r("src/**")));
    rules.push(rule(Deny, &[Read, Write], r("secret/**")));
    for d in 0..7 {
        rules.push(rule(Deny, &[Write], r(&format!("deps/p{d:03}/**"))));
    }
    for d in 10..15 {
        rules.push(rule(Deny, &[Read], r(&format!("deps/p{d:03}/**"))));
    }
    rules.push(rule(Allow, &[Read], r("**")));
    assert_eq!(rules.len(), 20);
    rules
}

async fn start(root: &Path, permissions: Vec<PermissionRule>) -> LocalSandbox {
    let options =
        LocalOptions { writable_roots: vec![root.to_owned()], permissions, ..LocalOptions::default() };
    LocalSandbox::start_with(&options).await.unwrap()
}

async fn exec(sb: &AgentdSandbox, request: ExecRequest) -> Duration {
    let started = Instant::now();
    let r = sb.exec(request, None).await.unwrap();
    let took = started.elapsed();
    assert_eq!(r.exit_code, 0, "{r:?}");
    took
}

fn exec_true() -> ExecRequest {
    ExecRequest { command: "true".into(), ..ExecRequest::default() }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// (median, p99) in µs.
fn summary(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    (micros(percentile(times, 0.5)), micros(percentile(times, 0.99)))
}

async fn run() {
    let tree = tempfile::tempdir().unwrap();
    let root = tree.path().canonicalize().unwrap();
    make_tree(&root);
    let rules = twenty_rules(&root);
    let none = start(&root, Vec::new()).await;
    let ruled = start(&root, rules.clone()).await;
    // allowed_commands is not a LocalOptions field: a per-exec override tightens the default
    // profile's (absent) list instead, which builds the same ruleset.
    let programs = ruled.agentd();
    let allowed = || {
        Some(Box::new(ProfileOverride {
            allowed_commands: Some(["true", "git", "python3", "ls", "cat"].map(str::to_owned).to_vec()),
            ..ProfileOverride::default()
        }))
    };

    println!("\n1. exec `true`, {ROUNDS} round trips each, in turns (rulesets built once, reused):");
    let (mut base, mut twenty, mut with_programs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..20 {
        exec(none.agentd(), exec_true()).await;
        exec(ruled.agentd(), exec_true()).await;
        exec(programs, ExecRequest { profile: allowed(), ..exec_true() }).await;
    }
    for _ in 0..ROUNDS {
        base.push(exec(none.agentd(), exec_true()).await);
        twenty.push(exec(ruled.agentd(), exec_true()).await);
        with_programs.push(exec(programs, ExecRequest { profile: allowed(), ..exec_true() }).await);
    }
    let (bm, bp) = summary(&mut base);
    let (tm, tp) = summary(&mut twenty);
    let (pm, pp) = summary(&mut with_programs);
    println!("  default profile, no rules:        median {bm:.0} µs, p99 {bp:.0} µs");
    println!("  + 20 permission rules:            median {tm:.0} µs, p99 {tp:.0} µs ({:.2}x)", tm / bm);
    println!("  + 20 rules + allowed_commands(5): median {pm:.0} µs, p99 {pp:.0} µs ({:.2}x)", pm / bm);

    println!("\n2. worst case: a ruleset built for every command ({COLD_ROUNDS} each, in turns):");
    let (mut warm, mut cold, mut cold_programs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..COLD_ROUNDS {
        // A deny rule on a path of its own each time: more distinct rulesets than the cache holds.
        let fresh = |allowed_commands: Option<Vec<String>>| {
            Some(Box::new(ProfileOverride {
                permissions: vec![rule(
                    PermissionMode::Deny,
                    &[Operation::Write],
                    format!("{}/deps/p{:03}/**", root.display(), 50 + i % 40),
                )],
                allowed_commands,
                ..ProfileOverride::default()
            }))
        };
        warm.push(exec(ruled.agentd(), exec_true()).await);
        cold.push(exec(ruled.agentd(), ExecRequest { profile: fresh(None), ..exec_true() }).await);
        let listed = Some(["true", "git", "python3", "ls", "cat"].map(str::to_owned).to_vec());
        cold_programs.push(exec(ruled.agentd(), ExecRequest { profile: fresh(listed), ..exec_true() }).await);
    }
    let (wm, wp) = summary(&mut warm);
    let (cm, cp) = summary(&mut cold);
    let (qm, qp) = summary(&mut cold_programs);
    println!("  20 rules, ruleset reused:          median {wm:.0} µs, p99 {wp:.0} µs");
    println!("  21 rules, ruleset built:           median {cm:.0} µs, p99 {cp:.0} µs ({:.2}x)", cm / wm);
    println!("  21 rules + programs, built:        median {qm:.0} µs, p99 {qp:.0} µs ({:.2}x)", qm / wm);

    println!("\n3. worst case: a pattern rule looked for in 10,200 files before every command:");
    let pattern = start(
        &root,
        vec![rule(
            PermissionMode::Deny,
            &[Operation::Read, Operation::Write],
            format!("{}/**/*.env", root.display()),
        )],
    )
    .await;
    let (mut plain, mut walked) = (Vec::new(), Vec::new());
    for _ in 0..COLD_ROUNDS / 2 {
        plain.push(exec(none.agentd(), exec_true()).await);
        walked.push(exec(pattern.agentd(), exec_true()).await);
    }
    let (am, ap) = summary(&mut plain);
    let (zm, zp) = summary(&mut walked);
    println!("  no rules:                          median {am:.0} µs, p99 {ap:.0} µs");
    println!("  `**/*.env` over the tree:          median {zm:.0} µs, p99 {zp:.0} µs ({:.1}x)", zm / am);

    println!("\n4. a verb with and without the 20 rules ({VERB_ROUNDS} each, in turns):");
    let file = format!("{}/src/m07/f3.py", root.display());
    let flat = format!("{}/flat", root.display());
    let src = format!("{}/src", root.display());
    // Two sandboxes on one writable root take it in turns (each lends it to its own sandbox
    // user), so writes are measured on two trees of their own, the same rules over the second.
    let (plain_tree, ruled_tree) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (plain_root, ruled_root) =
        (plain_tree.path().canonicalize().unwrap(), ruled_tree.path().canonicalize().unwrap());
    make_tree(&plain_root);
    make_tree(&ruled_root);
    let writers = [
        (start(&plain_root, Vec::new()).await, format!("{}/src/m03/bench-out.txt", plain_root.display())),
        (
            start(&ruled_root, twenty_rules(&ruled_root)).await,
            format!("{}/src/m03/bench-out.txt", ruled_root.display()),
        ),
    ];
    for (name, which) in [
        ("read", 0),
        ("write (an island)", 4),
        ("ls (200 entries)", 1),
        ("glob **/*.py (200)", 2),
        ("grep (200 files)", 3),
    ] {
        let (mut without, mut with) = (Vec::new(), Vec::new());
        let rounds = if matches!(which, 2 | 3) { VERB_ROUNDS / 4 } else { VERB_ROUNDS };
        for _ in 0..rounds {
            for (at, (sb, into)) in [(&none, &mut without), (&ruled, &mut with)].into_iter().enumerate() {
                let started = Instant::now();
                match which {
                    0 => assert!(sb.read(&file, 0, 100).await.unwrap().error.is_none()),
                    4 => {
                        let (writer, path) = &writers[at];
                        assert_eq!(writer.write(path, "out\n").await.unwrap().error, None);
                    }
                    1 => assert_eq!(sb.ls(&flat).await.unwrap().entries.unwrap().len(), 200),
                    2 => {
                        assert_eq!(sb.glob("**/*.py", Some(&src)).await.unwrap().matches.unwrap().len(), 200)
                    }
                    _ => assert_eq!(
                        sb.grep("needle", Some(&src), None, None).await.unwrap().matches.unwrap().len(),
                        200
                    ),
                }
                into.push(started.elapsed());
            }
        }
        let (om, op) = summary(&mut without);
        let (rm, rp) = summary(&mut with);
        println!(
            "  {name:<20} no rules: median {om:.0} µs, p99 {op:.0} µs; 20 rules: median {rm:.0} µs, p99 {rp:.0} µs ({:.2}x)",
            rm / om
        );
    }
}
