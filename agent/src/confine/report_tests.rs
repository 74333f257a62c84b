//! The report per ABI and machine, and what the child's measurement does to it.

use super::*;

fn profile(toml: &str) -> SandboxProfile {
    toml::from_str(toml).unwrap()
}

fn machine(abi: u32, seccomp: bool) -> Machine {
    Machine { abi, seccomp, processes_contained: true, privileges: Level::Full }
}

fn withheld() -> Vec<Withheld> {
    vec![Withheld::read_only("/sys/fs/cgroup".into()), Withheld::secret("/run/agentd.token".into())]
}

/// (filesystem, network, signals, level)
fn levels(report: &Enforcement) -> (Level, Level, Level, Level) {
    (report.filesystem, report.network, report.signals, report.level)
}

use Level::{Full, NotEnforced as No, NotRequested as Nr, Partial};

#[test]
fn every_abi_is_reported_as_it_is() {
    let p =
        profile("name = \"p\"\nwritable_roots = [\"/w\"]\nnetwork = \"deny\"\n[limits]\ncpu_seconds = 5\n");
    let expected = [
        // No landlock: seccomp refuses sockets, but a command can ptrace its way out.
        (0, (No, Partial, No, No)),
        // Truncate is covered from ABI 3.
        (1, (Partial, Full, No, No)),
        (2, (Partial, Full, No, No)),
        (3, (Full, Full, No, No)),
        (4, (Full, Full, No, No)),
        (5, (Full, Full, No, No)),
        // Signals are scoped from ABI 6.
        (6, (Full, Full, Full, Full)),
        (7, (Full, Full, Full, Full)),
    ];
    for (abi, want) in expected {
        let report = enforcement(&p, &machine(abi, true), &withheld());
        assert_eq!(levels(&report), want, "ABI {abi}: {:?}", report.notes);
        assert_eq!((report.limits, report.landlock_abi, report.mode), (Full, abi, Mode::Strict));
        // Anything less than full says why.
        let reasons = reasons(&report);
        assert_eq!(reasons.is_empty(), want.3 == Full, "ABI {abi}: {reasons}");
        assert!(report.notes.iter().any(|n| n.starts_with("withheld:") && n.contains("/run/agentd.token")));
    }
    let abi2 = enforcement(&p, &machine(2, true), &withheld());
    assert!(abi2.notes.iter().any(|n| n.contains("truncate")), "{:?}", abi2.notes);
    let abi5 = enforcement(&p, &machine(5, true), &withheld());
    assert!(
        abi5.notes.iter().any(|n| n.contains("signal scoping: needs landlock ABI 6")),
        "{:?}",
        abi5.notes
    );
}

#[test]
fn without_seccomp_network_deny_is_tcp_only_at_best() {
    let p = profile("name = \"p\"\nnetwork = \"deny\"\n");
    let expected = [(0, No), (3, No), (4, Partial), (7, Partial)];
    for (abi, want) in expected {
        let report = enforcement(&p, &machine(abi, false), &[]);
        assert_eq!(report.network, want, "ABI {abi}");
        assert!(reasons(&report).contains("network"), "ABI {abi}: {:?}", report.notes);
    }
    // With seccomp and landlock the same profile is full; filesystem is not asked (nothing withheld).
    let report = enforcement(&p, &machine(7, true), &[]);
    assert_eq!(levels(&report), (Nr, Full, Full, Full));
}

#[test]
fn withheld_paths_alone_make_a_filesystem_rule() {
    let p = profile("name = \"p\"\n[limits]\nprocesses = 8\n");
    for (abi, want) in [(0, No), (1, Partial), (2, Partial), (3, Full), (7, Full)] {
        let report = enforcement(&p, &machine(abi, true), &withheld());
        // Signals are scoped whenever landlock is applied, but only reported when the profile asks
        // for filesystem rules or network = "deny".
        assert_eq!((report.filesystem, report.network, report.signals), (want, Nr, Nr), "ABI {abi}");
        assert_eq!(report.mode, Mode::BestEffort);
    }
    let none = enforcement(&p, &machine(0, true), &withheld());
    assert!(
        none.notes.iter().any(|n| n.contains("can read and write what agentd withholds")),
        "{:?}",
        none.notes
    );
    // Nothing withheld, no roots: no filesystem rule.
    assert_eq!(enforcement(&p, &machine(7, true), &[]).filesystem, Nr);
}

#[test]
fn a_profile_needing_a_newer_abi_is_partial_on_every_landlock_rule() {
    let p = profile("name = \"p\"\nreadable_roots = [\"/\"]\nnetwork = \"deny\"\nlandlock_abi = 99\n");
    let report = enforcement(&p, &machine(7, true), &withheld());
    assert_eq!(levels(&report), (Partial, Partial, Partial, Partial));
}

#[test]
fn processes_without_a_cgroup_as_root_are_partial() {
    let p = profile("name = \"p\"\n[limits]\nprocesses = 8\n");
    let m = Machine { abi: 7, seccomp: true, processes_contained: false, privileges: Level::Full };
    let report = enforcement(&p, &m, &[]);
    assert_eq!((report.limits, report.level), (Partial, Partial));
}

#[test]
fn intent_follows_the_abi() {
    let deny = profile("name = \"p\"\nnetwork = \"deny\"\n");
    let allow = profile("name = \"p\"\n");
    assert_eq!(
        intent(&deny, 7, true, false),
        Intent { landlock: true, tcp: true, abstract_sockets: true, signals: true, seccomp: true }
    );
    assert_eq!(
        intent(&deny, 4, true, false),
        Intent { landlock: true, tcp: true, abstract_sockets: false, signals: false, seccomp: true }
    );
    assert_eq!(
        intent(&deny, 0, false, true),
        Intent { landlock: false, tcp: false, abstract_sockets: false, signals: false, seccomp: false }
    );
    // Network allowed, something withheld: a landlock domain with signals and abstract sockets
    // scoped, no network rule.
    assert_eq!(
        intent(&allow, 6, true, true),
        Intent { landlock: true, tcp: false, abstract_sockets: true, signals: true, seccomp: false }
    );
    assert!(!intent(&allow, 7, true, false).landlock);
}

fn full_report() -> Enforcement {
    let p = profile("name = \"p\"\nwritable_roots = [\"/w\"]\nnetwork = \"deny\"\n");
    enforcement(&p, &machine(7, true), &withheld())
}

const BOTH: Expect = Expect { landlock: true, seccomp: true, privileges: true };

#[test]
fn the_measurement_travels_intact() {
    for landlock in [Applied::NotAsked, Applied::Failed, Applied::NotEnforced, Applied::Full] {
        for bits in 0..8u8 {
            let (no_new_privs, seccomp, privileges) = (bits & 1 == 1, bits & 2 == 2, bits & 4 == 4);
            let m = Measured { landlock, no_new_privs, seccomp, privileges };
            assert_eq!(Measured::decode(m.encode()), Some(m));
        }
    }
    assert_eq!(Measured::decode([0, 5, 1, 1, 1]), None);
    assert_eq!(Measured::decode([b'S', 9, 1, 1, 1]), None);
    assert_eq!(Measured::decode([b'S', 4, 1, 1, 2]), None);
}

#[test]
fn short_of_is_anything_less_than_asked() {
    let full = Measured { landlock: Applied::Full, no_new_privs: true, seccomp: true, privileges: true };
    assert!(!full.short_of(BOTH));
    assert!(Measured { privileges: false, ..full }.short_of(BOTH));
    assert!(Measured { landlock: Applied::NotEnforced, ..full }.short_of(BOTH));
    assert!(Measured { landlock: Applied::Failed, ..full }.short_of(BOTH));
    assert!(Measured { seccomp: false, ..full }.short_of(BOTH));
    assert!(Measured { no_new_privs: false, ..full }.short_of(BOTH));
    // What was not asked is not missed.
    let none = Expect { landlock: false, seccomp: false, privileges: false };
    let bare =
        Measured { landlock: Applied::NotAsked, no_new_privs: true, seccomp: false, privileges: false };
    assert!(!bare.short_of(none));
}

#[test]
fn the_report_takes_what_the_child_measured() {
    let full = Measured { landlock: Applied::Full, no_new_privs: true, seccomp: true, privileges: true };
    let mut report = full_report();
    record(&mut report, BOTH, Some(full));
    assert_eq!(report, full_report());

    let mut report = full_report();
    record(&mut report, BOTH, Some(Measured { landlock: Applied::Failed, ..full }));
    // Seccomp still refuses sockets, nothing else holds.
    assert_eq!(levels(&report), (No, Partial, No, No));
    assert!(report.notes.iter().any(|n| n.contains("landlock_restrict_self failed")));

    let mut report = full_report();
    record(&mut report, BOTH, Some(Measured { seccomp: false, ..full }));
    // Landlock's TCP rules remain.
    assert_eq!(levels(&report), (Full, Partial, Full, Partial));
    assert!(report.notes.iter().any(|n| n.contains("UDP, raw and Unix sockets stay open")));

    let mut report = full_report();
    record(&mut report, BOTH, Some(Measured { privileges: false, ..full }));
    assert_eq!((report.privileges, report.level), (No, No));
    assert!(report.notes.iter().any(|n| n.contains("could not drop its privileges")));

    let mut report = full_report();
    record(&mut report, BOTH, None);
    assert_eq!(levels(&report), (No, No, No, No));
    assert_eq!(report.privileges, No);
}

#[test]
fn a_deny_rule_says_what_of_its_paths_metadata_is_not_kept() {
    let p = profile(
        "name = \"p\"\nwritable_roots = [\"/w\"]\n[[permissions]]\noperations = [\"write\"]\npaths = [\"/w/a\"]\nmode = \"deny\"\n",
    );
    let notes = |short: &[Vec<String>], apart| {
        let mut report = enforcement(&p, &machine(7, true), &[]);
        add_rules(&mut report, &p, short, None, apart, ExecWalls { memfd_filter: true, capabilities: false });
        report.permissions[0].notes.clone()
    };
    let owner = |notes: &[String]| notes.iter().any(|n| n.contains("mode, times and owner"));
    assert!(!owner(&notes(&[vec![]], true)), "named and lent apart: kept");
    assert!(owner(&notes(&[vec!["/w/a does not exist now".into()]], true)));
    assert!(owner(&notes(&[vec![]], false)), "commands own what agentd's user owns");
}

#[test]
fn programs_are_full_only_when_nothing_else_can_be_executed() {
    let p = profile("name = \"p\"\nwritable_roots = [\"/w\"]\nallowed_commands = [\"ls\", \"python\"]\n");
    let walls = |memfd_filter, capabilities| ExecWalls { memfd_filter, capabilities };
    let plain = Programs { files: vec!["/usr/bin/ls".into()], ..Programs::default() };
    let mut busybox = plain.clone();
    busybox.multi_call.push(("/bin/busybox".into(), vec!["id".into(), "wget".into()]));
    let mut venv = plain.clone();
    venv.changeable.push(("python".into(), "/w/venv".into()));
    for (programs, walls, want, says) in [
        (&plain, walls(true, false), Full, ""),
        (&plain, walls(false, false), Partial, "memfd_create is not refused"),
        (&plain, walls(true, true), Partial, "/proc/self/map_files"),
        (
            &busybox,
            walls(true, false),
            Partial,
            "/bin/busybox is a multi-call program: granted, it also runs as id, wget",
        ),
        // Not granted: it cannot run, which the rule allows.
        (&venv, walls(true, false), Full, "`python` is not granted: it resolves through /w/venv"),
    ] {
        let mut report = enforcement(&p, &machine(7, true), &[]);
        add_rules(&mut report, &p, &[], Some(programs), true, walls);
        assert_eq!((report.programs, report.level), (want, want), "{:?}", report.notes);
        assert!(report.notes.iter().any(|n| n.contains(says)), "{says}: {:?}", report.notes);
        // What a strict profile's refusal says.
        assert!(reasons(&report).contains(says), "{says}");
    }
    // The filter planned but not installed in the child: partial.
    let mut report = enforcement(&p, &machine(7, true), &[]);
    add_rules(&mut report, &p, &[], Some(&plain), true, walls(true, false));
    let expect = Expect { landlock: true, seccomp: true, privileges: false };
    let measured =
        Measured { landlock: Applied::Full, no_new_privs: true, seccomp: false, privileges: false };
    record(&mut report, expect, Some(measured));
    assert_eq!((report.programs, report.network), (Partial, Nr));
    assert!(
        report.notes.iter().any(|n| n.contains("could not be installed: memfd_create")),
        "{:?}",
        report.notes
    );
}
