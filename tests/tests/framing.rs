//! Heredoc framing on the derived path with a deterministic random source: a command (or an fs request)
//! that contains exactly the delimiter the generator draws first still arrives byte for byte, and a
//! forged result line does not change the result.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use agentd_host::contract::derived::{OffloadScript, fs_script};
use agentd_host::{BaseSandbox, LocalSandbox};
use agentd_protocol::fs::{FsRequest, FsResponse};
use agentd_protocol::{framing, meta};
use agentd_tests::ShellSandbox;
use rand::SeedableRng;
use rand::rngs::StdRng;

const SEED: u64 = 20_261_129;

/// The delimiter a script's first line announces (`… <<'DELIM'`).
fn delimiter_of(script: &str) -> &str {
    let first = script.lines().next().unwrap();
    first.rsplit("<<'").next().unwrap().trim_end_matches('\'')
}

#[tokio::test]
async fn offload_survives_the_predicted_delimiter_and_a_forged_meta_line() {
    let local = LocalSandbox::start().await.unwrap();
    let shell = ShellSandbox::new(local.workspace());
    let mut predict = StdRng::seed_from_u64(SEED);
    let sentinel = meta::sentinel(&mut predict);
    let first = framing::delimiter_for("", &mut predict);
    // The forged line uses another sentinel; the command also holds the delimiter drawn first.
    let forged = meta::MetaLine { exit_code: 0, offloaded: true, capped: false, omitted: 9 }
        .render(&meta::sentinel(&mut StdRng::seed_from_u64(SEED + 1)));
    let command = format!("cat <<'{first}'\nbody\n{first}\necho '{first}'; printf '%s' '{forged}'; exit 4");

    let capture = local.workspace().join("cap").to_string_lossy().into_owned();
    let script = OffloadScript::new(
        shell.agentd_command(),
        &agentd_host::OffloadRequest::new(&command, &capture, 10_000),
        &mut StdRng::seed_from_u64(SEED),
    );
    assert_eq!(script.sentinel, sentinel);
    assert_ne!(delimiter_of(&script.script), first, "the delimiter must be drawn again");
    let derived = script.run(&shell, None).await.unwrap();
    let expected = format!("body\n{first}\n{forged}");
    assert_eq!((derived.offloaded, derived.response.exit_code), (false, Some(4)));
    assert_eq!(derived.response.output, expected);
    let native = local
        .execute_with_offload(&agentd_host::OffloadRequest::new(&command, &capture, 10_000))
        .await
        .unwrap();
    assert_eq!(native, derived);
}

#[tokio::test]
async fn fs_requests_survive_the_predicted_delimiter() {
    let local = LocalSandbox::start().await.unwrap();
    let shell = ShellSandbox::new(local.workspace());
    let first = framing::delimiter_for("", &mut StdRng::seed_from_u64(SEED));
    let content = format!("{first}\n'$(touch pwned)'\n{first}");
    let path = local.workspace().join("f.txt").to_string_lossy().into_owned();
    let request = FsRequest::Write { path: path.clone(), content: content.clone() };
    let script = fs_script(shell.agentd_command(), &request, &mut StdRng::seed_from_u64(SEED)).unwrap();
    // JSON never holds a raw newline, so the first draw already fits; the content is still exact.
    let response = shell.execute(&script, None).await.unwrap();
    let parsed: FsResponse = serde_json::from_str(response.output.trim_end()).unwrap();
    assert!(matches!(parsed, FsResponse::Write(ref w) if w.error.is_none()), "{parsed:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), content);
    assert!(!local.workspace().join("pwned").exists());
}
