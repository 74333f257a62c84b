//! Exec admission (`agent/src/admission.rs`, included as is) on any decoded `exec` request, under a
//! server profile and without one: it admits or refuses, never panics, and what it admits is no
//! looser than the server's profile (timeouts within `max_timeout`, limits not above the server's,
//! the server's permission rules kept as they are, after only deny rules).
#![no_main]

#[expect(
    dead_code,
    unreachable_pub,
    reason = "a module of another crate, included as is: its `pub` items are the crate's, and the target uses part of it"
)]
#[path = "../../agent/src/admission.rs"]
mod admission;

#[expect(
    dead_code,
    unreachable_pub,
    reason = "a module of another crate, included as is: its `pub` items are the crate's, and the target uses part of it"
)]
#[path = "../../agent/src/permission.rs"]
mod permission;

use std::sync::OnceLock;
use std::time::Duration;

use agentd_protocol::ClientMessage;
use agentd_protocol::permission::{Operation, PermissionMode, PermissionRule};
use agentd_protocol::profile::{Limits, SandboxProfile};
use libfuzzer_sys::fuzz_target;

use admission::{ServerPolicy, ServerProfile, admit};

fn policies() -> &'static [ServerPolicy; 2] {
    static POLICIES: OnceLock<[ServerPolicy; 2]> = OnceLock::new();
    POLICIES.get_or_init(|| {
        let profile = SandboxProfile {
            name: "fuzz".to_owned(),
            writable_roots: Some(vec!["/tmp".to_owned()]),
            readable_roots: Some(vec!["/usr".to_owned(), "/tmp".to_owned()]),
            allowed_commands: Some(vec!["sh".to_owned(), "ls".to_owned()]),
            default_timeout: Some(60.0),
            max_timeout: Some(120.0),
            limits: Limits { processes: Some(64), cpu_seconds: Some(100), ..Limits::default() },
            permissions: server_rules(),
            ..SandboxProfile::default()
        };
        let profiled = ServerProfile::new(profile).expect("the fuzz profile is valid");
        [
            ServerPolicy { profile: Some(profiled), default_timeout: Some(Duration::from_secs(1800)) },
            ServerPolicy { profile: None, default_timeout: None },
        ]
    })
}

fn server_rules() -> Vec<PermissionRule> {
    vec![
        PermissionRule {
            operations: vec![Operation::Write],
            paths: vec!["/tmp/keep/**".to_owned()],
            mode: PermissionMode::Allow,
        },
        PermissionRule {
            operations: vec![Operation::Read, Operation::Write],
            paths: vec!["/tmp/**".to_owned()],
            mode: PermissionMode::Deny,
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(ClientMessage::Exec(request)) = agentd_protocol::decode_client(text) else { return };
    for (i, policy) in policies().iter().enumerate() {
        let Ok(admitted) = admit(policy, request.clone()) else { continue };
        if i == 0 {
            let profile = admitted.profile.expect("a profiled server confines every command");
            assert!(
                admitted.timeout.is_some_and(|t| t <= Duration::from_secs(120)),
                "{:?}",
                admitted.timeout
            );
            assert!(profile.limits.processes.is_some_and(|p| p <= 64));
            assert!(profile.limits.cpu_seconds.is_some_and(|c| c <= 100));
            for root in profile.writable_roots.iter().flatten() {
                assert!(root == "/tmp" || root.starts_with("/tmp/"), "{root}");
            }
            // The server's rules come last, unchanged; whatever a request put before them denies.
            let rules = &profile.permissions;
            let server = server_rules();
            assert!(rules.len() >= server.len() && rules[rules.len() - server.len()..] == server[..]);
            assert!(rules[..rules.len() - server.len()].iter().all(|r| r.mode == PermissionMode::Deny));
        }
    }
});
