//! File-verb benchmark: prints figures, asserts nothing. A generated tree of 10,000 files and
//! 2,000,000 lines; native verbs over the link, grep against `grep -rF` and `rg -F` (Debian's
//! `ripgrep`) on the same tree in the same run.
//!
//! ```text
//! cargo build --release --workspace && cargo bench -p agentd-tests --bench fs
//! ```

#![expect(clippy::unwrap_used, reason = "a benchmark binary: a failed step aborts it with its message")]

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use agentd_host::{BaseSandbox, LocalSandbox};
use agentd_tests::stats::{median, ms};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const LINES_PER_FILE: usize = 200;
const SMALL_RUNS: usize = 300;
const TREE_RUNS: usize = 7;

/// 100 directories × 100 files × 200 lines; one line in 50 holds the needle.
fn generate(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("pkg{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            let mut text = String::with_capacity(LINES_PER_FILE * 48);
            for l in 0..LINES_PER_FILE {
                if (d * FILES_PER_DIR + f + l).is_multiple_of(50) {
                    text.push_str(&format!("    value = compute_needle_{l}(x, y)  # file {f}\n"));
                } else {
                    text.push_str(&format!("    result_{l} = transform(data[{l}], scale={f})\n"));
                }
            }
            let ext = if f.is_multiple_of(2) { "py" } else { "txt" };
            std::fs::write(dir.join(format!("mod{f:03}.{ext}")), text).unwrap();
        }
    }
}

fn time_command(program: &str, args: &[&str], cwd: &Path) -> Option<(Duration, usize)> {
    let start = Instant::now();
    let out = Command::new(program).args(args).current_dir(cwd).stdin(Stdio::null()).output().ok()?;
    Some((start.elapsed(), out.stdout.iter().filter(|b| **b == b'\n').count()))
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(run());
}

async fn run() {
    let sb = LocalSandbox::start().await.unwrap();
    let tree = sb.workspace().join("tree");
    let start = Instant::now();
    generate(&tree);
    let big = sb.workspace().join("big.txt");
    std::fs::write(
        &big,
        (0..5000).map(|i| format!("line {i} of a long file with some text\n")).collect::<String>(),
    )
    .unwrap();
    println!(
        "tree: {} files, {} lines, generated in {:.1} s",
        DIRS * FILES_PER_DIR,
        DIRS * FILES_PER_DIR * LINES_PER_FILE,
        start.elapsed().as_secs_f64()
    );
    let tree_s = tree.to_str().unwrap().to_owned();
    let big_s = big.to_str().unwrap().to_owned();
    // Warm the page cache and the link for every contestant alike.
    let _ = time_command("grep", &["-rF", "needle", "."], &tree);
    sb.read(&big_s, 0, 2000).await.unwrap();

    let mut reads = Vec::new();
    let mut lss = Vec::new();
    let mut edits = Vec::new();
    let edited = format!("{tree_s}/pkg00/mod000.py");
    // The file the edits change belongs to the workspace's owner, as the files an agent edits do:
    // agentd's file work runs as the sandbox's user, who may not write what root made here.
    let owner = std::fs::metadata(sb.workspace()).unwrap();
    for path in [tree.join("pkg00"), PathBuf::from(&edited)] {
        std::os::unix::fs::chown(&path, Some(owner.uid()), Some(owner.gid())).unwrap();
    }
    for i in 0..SMALL_RUNS {
        let t = Instant::now();
        let r = sb.read(&big_s, 0, 2000).await.unwrap();
        reads.push(t.elapsed());
        assert_eq!(r.end_line, Some(2000));
        let t = Instant::now();
        let l = sb.ls(&format!("{tree_s}/pkg01")).await.unwrap();
        lss.push(t.elapsed());
        assert_eq!(l.entries.map(|e| e.len()), Some(FILES_PER_DIR));
        let (old, new) =
            if i.is_multiple_of(2) { ("result_7 =", "RESULT_7 =") } else { ("RESULT_7 =", "result_7 =") };
        let t = Instant::now();
        let e = sb.edit(&edited, old, new, false).await.unwrap();
        edits.push(t.elapsed());
        assert_eq!(e.occurrences, Some(1), "{e:?}");
    }
    println!("read 2000 lines (native): median {:.3} ms", ms(median(reads)));
    println!("ls of 100 entries (native): median {:.3} ms", ms(median(lss)));
    println!("edit round trip (native): median {:.3} ms   (target < 0.5 ms each)", ms(median(edits)));

    let derived = agentd_tests::ShellSandbox::new(sb.workspace());
    let mut derived_reads = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        derived.read(&big_s, 0, 2000).await.unwrap();
        derived_reads.push(t.elapsed());
    }
    println!("read 2000 lines (derived, agentd fs via sh -c): median {:.3} ms", ms(median(derived_reads)));

    let (mut ours, mut grep_rf, mut rg) = (Vec::new(), Vec::new(), Vec::new());
    let mut counts = (0, 0, 0);
    let have_rg = Command::new("rg").arg("--version").output().is_ok();
    for _ in 0..TREE_RUNS {
        let t = Instant::now();
        let r = sb.grep("needle", Some(&tree_s), None, None).await.unwrap();
        ours.push(t.elapsed());
        counts.0 = r.matches.map_or(0, |m| m.len());
        let (d, n) = time_command("grep", &["-rnF", "needle", "."], &tree).unwrap();
        grep_rf.push(d);
        counts.1 = n;
        if have_rg {
            let (d, n) = time_command("rg", &["-nF", "needle", "."], &tree).unwrap();
            rg.push(d);
            counts.2 = n;
        }
    }
    let (ours, grep_rf) = (median(ours), median(grep_rf));
    println!("grep over the tree (native, {} matches): median {:.1} ms", counts.0, ms(ours));
    println!(
        "grep -rnF ({} lines): median {:.1} ms -> ratio {:.2}x",
        counts.1,
        ms(grep_rf),
        ms(ours) / ms(grep_rf)
    );
    if have_rg {
        let rg = median(rg);
        println!(
            "rg -nF ({} lines): median {:.1} ms -> ratio {:.2}x (target <= 1.2x)",
            counts.2,
            ms(rg),
            ms(ours) / ms(rg)
        );
    } else {
        println!("rg -nF: not installed (apt-get install ripgrep), no baseline");
    }

    let mut globs = Vec::new();
    let mut found = 0;
    for _ in 0..TREE_RUNS {
        let t = Instant::now();
        let g = sb.glob("**/*.py", Some(&tree_s)).await.unwrap();
        globs.push(t.elapsed());
        found = g.matches.map_or(0, |m| m.len());
    }
    println!(
        "glob **/*.py over the tree (native, {found} matches): median {:.1} ms (target <= 20 ms)",
        ms(median(globs))
    );
}
