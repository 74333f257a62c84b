//! agentctl against providers that are not to be trusted: the fake Daytona and the fake Modal
//! listing ids that would climb out of the sandbox collection (`../../../../evil/delete-me`,
//! `a%2Fb`) and names full of terminal escapes, and answering with bodies of gigabytes.
//!
//! What must hold: `sandbox gc` sends nothing for an id of the wrong shape (every request the fake
//! Daytona recorded is `/api/sandbox` or `/api/sandbox/<well-formed id>…`; the fake Modal sees no
//! terminate for it), says so escaped and carries on, exiting 1; `sandbox ls` prints every name
//! with its control characters written out; a 2 GiB answer fails with `TooLarge` while agentctl's
//! peak RSS stays under 128 MiB. No Docker is needed: the hostile records have no container, and
//! agentctl's Docker is pointed at a socket that does not exist (so its listing fails, which
//! `ls` and `gc` must also survive).
//!
//! Like `agentctl.rs`, these run `target/<profile>/agentctl` as built: `cargo build --workspace`
//! first (a test run alone does not rebuild the binary).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::Duration;

use agentd_fakes::fake_daytona::FakeDaytona;
use agentd_fakes::fake_modal::FakeModal;
use agentd_tests::agentctl::{Run, agentctl, run, with_daytona, with_modal};

/// Ids no request may carry, and their sources.
const HOSTILE_IDS: [&str; 4] = ["../../../../evil/delete-me", "a%2Fb", "\u{1b}]0;pwned\u{7}", ".."];
/// Names (sources) that would retitle and clear a terminal.
const TITLE: &str = "\u{1b}]0;pwned\u{7}";
const CLEAR: &str = "\u{1b}[2J";
/// The peak RSS agentctl may reach while refusing a 2 GiB answer.
const RSS_LIMIT_KIB: i64 = 128 * 1024;
const HUGE: u64 = 2 << 30;

/// No raw control character of the hostile names reached the terminal.
fn assert_no_raw_controls(run: &Run) {
    for (stream, text) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\u{9b}']),
            "a raw control character on {stream}: {text:?}"
        );
    }
}

/// `Some(id)` of a request to `/api/sandbox/<id>…`, `None` for the listing `/api/sandbox`; panics
/// on anything else.
fn sandbox_of(request: &str) -> Option<String> {
    let (_method, target) = request.split_once(' ').unwrap();
    let path = target.split('?').next().unwrap();
    if path == "/api/sandbox" {
        return None;
    }
    let rest =
        path.strip_prefix("/api/sandbox/").unwrap_or_else(|| panic!("outside the collection: {request}"));
    Some(rest.split('/').next().unwrap().to_owned())
}

#[test]
fn gc_on_daytona_sends_nothing_for_a_malformed_id_and_carries_on() {
    let state = tempfile::tempdir().unwrap();
    let fake = FakeDaytona::start();
    for id in HOSTILE_IDS {
        fake.add_listed(id, "hostile");
    }
    fake.add_listed("ok-sandbox-1", TITLE);
    fake.add_listed("ok-sandbox-2", CLEAR);
    let mut command = agentctl(&state);
    with_daytona(&mut command, &fake);
    let run = run(command.args(["sandbox", "gc"]), Duration::from_secs(60));

    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_no_raw_controls(&run);
    for shown in [r"`../../../../evil/delete-me`", r"`a%2Fb`", r"`\x1b]0;pwned\x07`", "`..`"] {
        assert!(
            run.stderr
                .contains(&format!("Daytona: {shown} is not a well-formed sandbox id; nothing was sent")),
            "{shown}: {}",
            run.stderr
        );
    }
    // The well-formed ones were removed all the same, their names escaped.
    assert!(run.stdout.contains(r"removed daytona:ok-sandbox-1 (\x1b]0;pwned\x07)"), "{}", run.stdout);
    assert!(run.stdout.contains(r"removed daytona:ok-sandbox-2 (\x1b[2J)"), "{}", run.stdout);
    assert!(run.stdout.contains("2 sandbox(es) removed"), "{}", run.stdout);

    // Nothing outside /api/sandbox/<well-formed id>, and every such id was one of the two.
    let requests = fake.requests();
    let mut deleted = Vec::new();
    for request in &requests {
        if let Some(id) = sandbox_of(request) {
            assert!(agentd_host::check_id("test", &id).is_ok(), "{request}");
            assert!(id.starts_with("ok-sandbox-"), "{request}");
            if request.starts_with("DELETE ") {
                deleted.push(id);
            }
        }
    }
    deleted.sort();
    assert_eq!(deleted, ["ok-sandbox-1", "ok-sandbox-2"], "{requests:?}");
    assert!(!requests.iter().any(|r| r.contains("evil") || r.to_lowercase().contains("%2f")), "{requests:?}");
    // What was refused is still listed: gc did not pretend.
    let mut left = fake.sandbox_ids();
    left.retain(|id| !id.starts_with("ok-sandbox-"));
    left.sort();
    let mut hostile = HOSTILE_IDS.map(str::to_owned).to_vec();
    hostile.sort();
    assert_eq!(left, hostile);
}

#[test]
fn gc_on_modal_never_terminates_a_malformed_id() {
    let state = tempfile::tempdir().unwrap();
    let fake = FakeModal::start();
    for id in HOSTILE_IDS.iter().copied().chain(["sb-a_b", "sb-../x"]) {
        fake.add_listed(id, "hostile");
    }
    fake.add_listed("sb-good1", TITLE);
    let mut command = agentctl(&state);
    with_modal(&mut command, &fake);
    let run = run(command.args(["sandbox", "gc"]), Duration::from_secs(60));

    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert_no_raw_controls(&run);
    assert_eq!(fake.terminated(), ["sb-good1"], "{}", run.stderr);
    for shown in [r"`../../../../evil/delete-me`", r"`\x1b]0;pwned\x07`", "`sb-a_b`", "`sb-../x`"] {
        assert!(
            run.stderr.contains(&format!("Modal: {shown} is not a well-formed sandbox id")),
            "{shown}: {}",
            run.stderr
        );
    }
    assert!(run.stdout.contains(r"removed modal:sb-good1 (\x1b]0;pwned\x07)"), "{}", run.stdout);
}

/// Both providers listed, one of them (Docker) unreachable: the table has every row with its
/// escapes written out, the failure is said, and the exit status is 1. `--json` stays JSON with
/// the names as they are (serde escapes the controls).
#[test]
fn sandbox_ls_escapes_names_and_survives_a_failing_provider() {
    let state = tempfile::tempdir().unwrap();
    let (daytona, modal) = (FakeDaytona::start(), FakeModal::start());
    daytona.add_listed("ls-title", TITLE);
    daytona.add_listed("../../../../evil/delete-me", CLEAR);
    modal.add_listed("sb-ls1", CLEAR);
    modal.add_listed("sb-\u{1b}[2J", "x");
    let ls = |json: bool| {
        let mut command = agentctl(&state);
        with_daytona(&mut command, &daytona);
        with_modal(&mut command, &modal);
        command.arg("sandbox").arg("ls");
        if json {
            command.arg("--json");
        }
        run(&mut command, Duration::from_secs(60))
    };
    let table = ls(false);
    assert_eq!(table.code, Some(1), "{}", table.stderr);
    assert_no_raw_controls(&table);
    assert!(table.stderr.contains("docker: Docker"), "the Docker failure is said: {}", table.stderr);
    // KIND, ID, SOURCE, STATE: the escaped forms hold no space, so each is one word.
    for row in [
        ["daytona", "ls-title", r"\x1b]0;pwned\x07", "started"],
        ["daytona", "../../../../evil/delete-me", r"\x1b[2J", "started"],
        ["modal", "sb-ls1", r"\x1b[2J", "running"],
        ["modal", r"sb-\x1b[2J", "x", "running"],
    ] {
        let found = table.stdout.lines().any(|line| line.split_whitespace().eq(row.iter().copied()));
        assert!(found, "{row:?}:\n{}", table.stdout);
    }
    // Nothing but the listing was asked of Daytona.
    assert!(daytona.requests().iter().all(|r| sandbox_of(r).is_none()), "{:?}", daytona.requests());

    let json = ls(true);
    assert_eq!(json.code, Some(1), "{}", json.stderr);
    assert_no_raw_controls(&json);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json.stdout).unwrap();
    let source = |id: &str| rows.iter().find(|r| r["id"] == id).map(|r| r["source"].clone());
    assert_eq!(source("ls-title"), Some(serde_json::json!(TITLE)), "{}", json.stdout);
    assert_eq!(source("sb-\u{1b}[2J"), Some(serde_json::json!("x")), "{}", json.stdout);
}

/// A listing answered with 2 GiB (streamed, no `Content-Length`): refused at the 16 MiB cap.
#[test]
fn a_huge_listing_is_refused_in_bounded_memory_and_time() {
    let state = tempfile::tempdir().unwrap();
    let fake = FakeDaytona::start();
    fake.huge_answers("/api/sandbox", HUGE);
    let mut command = agentctl(&state);
    with_daytona(&mut command, &fake);
    let run = run(command.args(["sandbox", "ls"]), Duration::from_secs(60));
    eprintln!("sandbox ls against a 2 GiB listing: {:?}, peak RSS {} KiB", run.elapsed, run.max_rss_kib);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("daytona: list sandboxes: the answer passed the limit of 16777216 bytes; refused"),
        "{}",
        run.stderr
    );
    assert!(run.max_rss_kib < RSS_LIMIT_KIB, "peak RSS {} KiB", run.max_rss_kib);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

/// A toolbox exec answered with 2 GiB: refused at the 25 MiB cap, on attach (agentd's probe) and
/// on the command itself.
#[test]
fn a_huge_exec_result_is_refused_in_bounded_memory_and_time() {
    let state = tempfile::tempdir().unwrap();
    let fake = FakeDaytona::start();
    fake.add_listed("exec-huge", "x");
    fake.huge_answers("/process/execute", HUGE);
    let mut command = agentctl(&state);
    with_daytona(&mut command, &fake);
    let run = run(
        command.args(["--sandbox", "daytona-attach:exec-huge", "exec", "--", "true"]),
        Duration::from_secs(60),
    );
    eprintln!("exec against a 2 GiB toolbox answer: {:?}, peak RSS {} KiB", run.elapsed, run.max_rss_kib);
    assert_eq!(run.code, Some(125), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "toolbox exec in Daytona sandbox exec-huge: the answer passed the limit of 26214400 bytes"
        ),
        "{}",
        run.stderr
    );
    assert!(fake.requests().iter().any(|r| r.starts_with("POST /toolbox/exec-huge/process/execute")));
    assert!(run.max_rss_kib < RSS_LIMIT_KIB, "peak RSS {} KiB", run.max_rss_kib);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}

/// A Modal sandbox whose every router exec prints without end: each stream is refused at the
/// 25 MiB cap (agentd's probe on attach, then the command itself).
#[test]
fn endless_router_output_is_refused_in_bounded_memory_and_time() {
    let state = tempfile::tempdir().unwrap();
    let fake = FakeModal::start();
    fake.add_listed("sb-endless", "x");
    fake.endless_stdout(true);
    let mut command = agentctl(&state);
    with_modal(&mut command, &fake);
    let run = run(
        command.args(["--sandbox", "modal-attach:sb-endless", "exec", "--", "true"]),
        Duration::from_secs(60),
    );
    eprintln!("exec against an endless router stdout: {:?}, peak RSS {} KiB", run.elapsed, run.max_rss_kib);
    assert_eq!(run.code, Some(125), "{}", run.stderr);
    assert!(
        run.stderr.contains("in Modal's command router: the answer passed the limit of 26214400 bytes"),
        "{}",
        run.stderr
    );
    assert!(run.max_rss_kib < RSS_LIMIT_KIB, "peak RSS {} KiB", run.max_rss_kib);
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
}
