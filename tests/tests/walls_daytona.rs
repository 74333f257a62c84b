//! The walls of a Daytona download, each tried as the attack that got through: a bulk download of
//! one 512 MiB part, which agentctl held whole in memory (270 MiB peak, then refused at the 256 MiB
//! per-file bound), and a toolbox that lies about a part's length (sends more than its
//! `Content-Length`, or less).
//!
//! What must hold: `agentctl download` through the toolbox (no link to agentd) streams the part to
//! its file, so agentctl's peak RSS stays far below the part's size and the file is whole (size and
//! sha256); a part that sends more than it announced is cut off at once, one that sends less fails
//! at its end, and either leaves nothing at the destination; the contract's `download_files`, which
//! holds files whole, still refuses a part past its 256 MiB bound, before reading it. No Docker is
//! needed: the sandboxes are records of the fake Daytona with no container (so agentd cannot be put
//! in and there is no link), and their parts are generated as they are sent.
//!
//! Like `hostile_providers.rs`, these run `target/<profile>/agentctl` as built: `cargo build
//! --workspace` first (a test run alone does not rebuild the binary).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentd_fakes::fake_daytona::{FakeDaytona, generated_bytes};
use agentd_host::adapters::daytona::{DaytonaConfig, DaytonaMode, DaytonaOptions, DaytonaSandbox};
use agentd_host::{BaseSandbox as _, SandboxError};
use agentd_tests::agentctl::{Run, agentctl, run, with_daytona};
use sha2::{Digest as _, Sha256};

const MIB: u64 = 1 << 20;
/// The part of the attack: twice the 256 MiB that one file may take in memory.
const PART: u64 = 512 * MIB;
/// agentctl's peak RSS while it downloads [`PART`]: memory must not follow the file's size. An
/// idle agentctl (debug build) peaks at about 15 MiB; a held part would cost the part.
const RSS_LIMIT_KIB: i64 = 64 * 1024;

/// The sha256 of a generated part of `len` bytes, as the fake sends it.
fn generated_sha256(len: u64) -> String {
    let mut hasher = Sha256::new();
    for chunk in generated_bytes(len) {
        hasher.update(&chunk);
    }
    format!("{:x}", hasher.finalize())
}

fn file_sha256(path: &Path) -> String {
    let mut file = std::fs::File::open(path).unwrap();
    let mut hasher = Sha256::new();
    let mut buffer = vec![0_u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).unwrap();
        if n == 0 {
            return format!("{:x}", hasher.finalize());
        }
        hasher.update(&buffer[..n]);
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A fake Daytona whose container-less sandbox `name` has the generated file `/data/<name>.bin`
/// (`bytes` bytes, `announced` in its part's `Content-Length`), and where to save it.
struct Case {
    fake: FakeDaytona,
    state: tempfile::TempDir,
    name: String,
    remote: String,
    local: PathBuf,
}

impl Case {
    fn new(name: &str, bytes: u64, announced: Option<u64>) -> Self {
        let (fake, state) = (FakeDaytona::start(), tempfile::tempdir().unwrap());
        let remote = format!("/data/{name}.bin");
        fake.add_listed(name, "x");
        fake.generated_file(&remote, bytes, announced);
        let local = state.path().join(format!("{name}.bin"));
        Self { fake, state, name: name.to_owned(), remote, local }
    }

    /// `agentctl download REMOTE LOCAL` (through the toolbox's bulk download: without a container
    /// agentd cannot be put in, so there is no link), its peak RSS measured.
    fn download(&self) -> Run {
        let mut command = agentctl(&self.state);
        with_daytona(&mut command, &self.fake);
        let sandbox = format!("daytona-attach:{}", self.name);
        command.args(["--json", "--sandbox", &sandbox, "download", &self.remote]).arg(&self.local);
        let run = run(&mut command, Duration::from_secs(120));
        eprintln!(
            "download of {}: exit {:?} in {:?}, peak RSS {} KiB, the fake sent {} MiB of parts; stderr: {}",
            self.remote,
            run.code,
            run.elapsed,
            run.max_rss_kib,
            self.fake.generated_sent() / MIB,
            run.stderr.trim()
        );
        run
    }

    /// The download fails saying `why`, and leaves nothing at the destination nor beside it.
    fn fails_leaving_nothing(&self, why: &str) -> Run {
        let before = names(self.state.path());
        let run = self.download();
        assert_ne!(run.code, Some(0), "{}", run.stdout);
        assert!(run.stderr.contains(why), "{}", run.stderr);
        assert!(!self.local.exists());
        assert_eq!(names(self.state.path()), before, "left beside the destination");
        run
    }
}

/// The attack: one 512 MiB part. Before, agentctl held it whole (up to the 256 MiB per-file bound,
/// a 282 MiB peak) and failed; now it lands in its file at a bounded peak.
#[test]
fn a_512_mib_part_streams_to_its_file_in_bounded_memory() {
    let case = Case::new("big", PART, Some(PART));
    let run = case.download();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(case.fake.requests().iter().any(|r| r == "POST /toolbox/big/files/bulk-download"));
    let expected = generated_sha256(PART);
    let answer: serde_json::Value = serde_json::from_str(run.stdout.trim()).unwrap();
    assert_eq!((answer["size"].as_u64(), answer["sha256"].as_str()), (Some(PART), Some(expected.as_str())));
    assert_eq!(std::fs::metadata(&case.local).unwrap().len(), PART);
    assert_eq!(file_sha256(&case.local), expected);
    assert!(run.max_rss_kib < RSS_LIMIT_KIB, "peak RSS {} KiB for a {PART}-byte part", run.max_rss_kib);
}

/// A part with no `Content-Length` (older toolboxes send none) streams the same.
#[test]
fn a_part_without_a_length_streams_too() {
    let case = Case::new("plain", 3 * MIB + 7, None);
    let run = case.download();
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(file_sha256(&case.local), generated_sha256(3 * MIB + 7));
}

/// A toolbox that announces 1 MiB and sends 512: cut off at once (the fake has sent a fraction of
/// it), and nothing at the destination, nor beside it.
#[test]
fn a_part_longer_than_it_announced_is_cut_off_and_leaves_nothing() {
    let case = Case::new("lie", PART, Some(MIB));
    let run =
        case.fails_leaving_nothing("the part of /data/lie.bin sent more than the 1048576 bytes it announced");
    assert!(case.fake.generated_sent() < 64 * MIB, "the fake sent {} bytes", case.fake.generated_sent());
    assert!(run.max_rss_kib < RSS_LIMIT_KIB, "peak RSS {} KiB", run.max_rss_kib);
}

/// A toolbox that announces 8 MiB and sends 5: refused at the part's end, nothing left.
#[test]
fn a_part_shorter_than_it_announced_fails_and_leaves_nothing() {
    let case = Case::new("short", 5 * MIB, Some(8 * MIB));
    case.fails_leaving_nothing(
        "the part of /data/short.bin ended after 5242880 of the 8388608 bytes it announced",
    );
}

/// The contract's `download_files` holds files whole: a part that announces more than the 256 MiB
/// bound is refused before any of it is read, and one that lies about its length is cut off.
#[tokio::test]
async fn download_files_keeps_its_bound_and_refuses_a_lie() {
    let fake = FakeDaytona::start();
    fake.add_listed("whole", "x");
    fake.generated_file("/data/huge.bin", PART, Some(PART));
    fake.generated_file("/data/lie.bin", 4 * MIB, Some(MIB));
    fake.generated_file("/data/ok.bin", MIB + 3, Some(MIB + 3));
    let options = DaytonaOptions { mode: DaytonaMode::ToolboxExec, ..DaytonaOptions::default() };
    let sb = DaytonaSandbox::attach(DaytonaConfig::new(fake.api_url(), fake.api_key()), "whole", &options)
        .await
        .unwrap();
    let ok = sb.download_files(&["/data/ok.bin".to_owned()]).await.unwrap();
    let content = ok[0].content.as_deref().unwrap();
    assert_eq!(format!("{:x}", Sha256::digest(content)), generated_sha256(MIB + 3));
    let sent = fake.generated_sent();
    let err = sb.download_files(&["/data/huge.bin".to_owned()]).await.unwrap_err();
    assert!(matches!(err, SandboxError::TooLarge { limit: 268435456, .. }), "{err}");
    assert!(fake.generated_sent() - sent < 64 * MIB, "read {} bytes", fake.generated_sent() - sent);
    let err = sb.download_files(&["/data/lie.bin".to_owned()]).await.unwrap_err();
    assert!(err.to_string().contains("sent more than the 1048576 bytes it announced"), "{err}");
}
