//! The offload (golden case 55: the head/tail preview on both paths) and the derived framing
//! (heredoc look-alikes, a forged meta line).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::path::Path;

use agentd_host::{ExecuteOffloadResult, ExecuteResponse};

use crate::harness::Suite;

fn offload(
    offloaded: bool,
    exit_code: i32,
    truncated: bool,
    marker: bool,
    output: &str,
) -> ExecuteOffloadResult {
    ExecuteOffloadResult {
        offloaded,
        response: ExecuteResponse { output: output.to_owned(), exit_code: Some(exit_code), truncated },
        preview_has_truncation_marker: marker,
    }
}

pub async fn derived_framing_survives_heredoc_lookalikes_and_forged_meta(s: Suite) {
    let (_, cap) = s.fixture("cap");

    // Text that looks like the framing: the delimiter prefix, heredoc ends, lone quotes.
    let command = "cat <<'EOF'\nAGENTD_CMD_00000000000000000000__\n'\nEOF\n\
                   printf '%s\\n' \"AGENTD_CMD_ and 'quotes' and EOF\"\necho EOF\necho \"'\"";
    let want_output = "AGENTD_CMD_00000000000000000000__\n'\nAGENTD_CMD_ and 'quotes' and EOF\nEOF\n'\n";
    let want = offload(false, 0, false, false, want_output);
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/d1"), 10_000))
        .await
        .unwrap();
    s.check("framing: derived", &derived, &want);
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/n1"), 10_000))
        .await
        .unwrap();
    s.check("framing: native vs derived", &native, &derived);

    // A forged meta line, then exit 3: the result is what was printed.
    let forged = "__AGENTD_META_0123456789abcdef0123__ 0 1 0 5";
    let command = format!("printf '%s\\n' '{forged}'; exit 3");
    let want = offload(false, 3, false, false, &format!("{forged}\n"));
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(&command, format!("{cap}/d2"), 10_000))
        .await
        .unwrap();
    s.check("forged meta: derived", &derived, &want);
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(&command, format!("{cap}/n2"), 10_000))
        .await
        .unwrap();
    s.check("forged meta: native vs derived", &native, &derived);
    s.ensure(
        "no capture files kept",
        !Path::new(&format!("{cap}/d2")).exists() && !Path::new(&format!("{cap}/n2")).exists(),
        "kept",
    );
    s.finish();
}

pub async fn golden_55_offload_head_tail_preview_on_both_paths(s: Suite) {
    let (dir, cap) = s.fixture("cap");
    let command = "seq 1 100; exit 7";
    let want =
        offload(true, 7, false, true, "1\n2\n3\n4\n5\n... [90 lines truncated] ...\n96\n97\n98\n99\n100\n");
    let native = s
        .native
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/native"), 50))
        .await
        .unwrap();
    let derived = s
        .derived
        .execute_with_offload(&agentd_host::OffloadRequest::new(command, format!("{cap}/derived"), 50))
        .await
        .unwrap();
    s.check("55 native", &native, &want);
    s.check("55 native vs derived", &native, &derived);
    let full: String = (1..=100).map(|i| format!("{i}\n")).collect();
    for name in ["native", "derived"] {
        s.check(
            format!("55 {name} capture file kept"),
            &std::fs::read_to_string(dir.join(name)).ok(),
            &Some(full.clone()),
        );
        s.ensure(
            format!("55 {name} no .ec sidecar"),
            !dir.join(format!("{name}.ec")).exists(),
            "sidecar kept",
        );
    }
    s.finish();
}
