//! The landlock ruleset of a command, and the kernel's landlock ABI.

use std::path::Path;

use agentd_protocol::profile::SandboxProfile;
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible as _, Ruleset, RulesetAttr as _,
    RulesetCreated, Scope,
};

use agentd_protocol::permission::Operation;

use super::carve::Keep;
use super::permits::{PermitPlan, Programs, rights};
use super::report::{Intent, has_fs_rules};
use super::{Withheld, carve};

/// The landlock ABI our filesystem rules are written for (rights up to `IoctlDev`).
const RULES_ABI: ABI = ABI::V5;

/// The landlock ruleset of one command. It asks exactly what this kernel offers (up to the rules'
/// ABI), so landlock reports "fully enforced" unless something failed; what an older ABI leaves
/// uncovered is the report's business ([`enforcement`](super::report::enforcement)).
///
/// `permits`: the permission rules' subtrees ([`super::permits`]); `programs`: with
/// `allowed_commands`, the only files given the execute right.
pub(super) fn build_ruleset(
    profile: &SandboxProfile,
    want: &Intent,
    abi: u32,
    withheld: &[Withheld],
    permits: &PermitPlan,
    programs: Option<&Programs>,
    seen: &mut Vec<carve::Seen>,
) -> Result<RulesetCreated, String> {
    let error = |e: landlock::RulesetError| e.to_string();
    let fs_abi = ABI::from(i32::try_from(abi).unwrap_or(i32::MAX)).min(RULES_ABI);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(fs_abi))
        .map_err(error)?;
    if want.tcp {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(error)?;
    }
    let mut scopes = landlock::BitFlags::<Scope>::empty();
    if want.signals {
        scopes |= Scope::Signal;
    }
    if want.abstract_sockets {
        scopes |= Scope::AbstractUnixSocket;
    }
    if !scopes.is_empty() {
        ruleset = ruleset.scope(scopes).map_err(error)?;
    }
    let mut created = ruleset.create().map_err(error)?;
    // Handled, and granted nowhere: no command makes a device node, in its roots or anywhere (a
    // node of the disk or of a loop device reads and writes what no root covers).
    let no_exec = if programs.is_some() { AccessFs::Execute.into() } else { landlock::BitFlags::empty() };
    let all = AccessFs::from_all(fs_abi) & !(AccessFs::MakeBlock | AccessFs::MakeChar) & !no_exec;
    let read = AccessFs::from_read(fs_abi) & !no_exec;
    // The permission rules' denied subtrees are withheld like agentd's own paths; a subtree read is
    // granted back in keeps its name (a write-denied one lacks the rights to rename already).
    let mut kept = withheld.to_vec();
    kept.extend(permits.denied.iter().map(|(path, operation)| Withheld {
        path: path.clone(),
        keep: match operation {
            Operation::Read => Keep::Reads,
            Operation::Write => Keep::Writes,
        },
    }));
    let named = permits.allowed.iter().filter(|(_, operation)| *operation == Operation::Read);
    kept.extend(named.map(|(path, _)| Withheld { path: path.clone(), keep: Keep::Name }));
    if has_fs_rules(profile) {
        let readable = profile.readable_roots.clone().unwrap_or_else(|| vec!["/".to_owned()]);
        for root in &readable {
            created = carve::add_root(created, Path::new(root), read, &kept, fs_abi, seen)?;
        }
        // Writable roots default to nothing when only readable roots are given.
        for root in profile.writable_roots.iter().flatten() {
            created = carve::add_root(created, Path::new(root), all, &kept, fs_abi, seen)?;
        }
        // Every shell writes to /dev/null.
        created = carve::add_root(
            created,
            Path::new("/dev/null"),
            AccessFs::from_file(fs_abi) & !no_exec,
            &kept,
            fs_abi,
            seen,
        )?;
    } else {
        // No filesystem roots: everything, less what is withheld.
        created = carve::add_root(created, Path::new("/"), all, &kept, fs_abi, seen)?;
    }
    // Allowed subtrees inside denied ones: the operation's rights where the roots grant them,
    // carved around what is denied again beneath them.
    for (node, operation) in &permits.allowed {
        // A missing allowed name has nothing to grant yet; its way keeps its name (above).
        if std::fs::symlink_metadata(node).is_err() {
            continue;
        }
        let granted = rights(*operation, fs_abi) & root_rights(profile, node, all, read) & !no_exec;
        let mut beneath = withheld.to_vec();
        beneath.extend(
            kept[withheld.len()..].iter().filter(|w| w.path != *node && w.path.starts_with(node)).cloned(),
        );
        created = carve::add_root(created, node, granted, &beneath, fs_abi, seen)?;
    }
    // With `allowed_commands`, the execute right only on these files (not where they are withheld).
    if let Some(programs) = programs {
        for file in programs.files.iter().chain(&programs.interpreters) {
            created = carve::add_root(created, file, AccessFs::Execute.into(), &kept, fs_abi, seen)?;
        }
    }
    Ok(created)
}

/// What the profile's roots grant at `path` (`all` and `read` as the ruleset grants them).
fn root_rights(
    profile: &SandboxProfile,
    path: &Path,
    all: landlock::BitFlags<AccessFs>,
    read: landlock::BitFlags<AccessFs>,
) -> landlock::BitFlags<AccessFs> {
    if !has_fs_rules(profile) {
        return all;
    }
    let beneath = |roots: &[String]| roots.iter().any(|root| path.starts_with(root));
    if profile.writable_roots.as_deref().is_some_and(beneath) {
        all
    } else if profile.readable_roots.as_deref().is_none_or(beneath) {
        read
    } else {
        landlock::BitFlags::empty()
    }
}

/// The kernel's landlock ABI: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
pub(super) fn kernel_landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag the kernel only returns the
    // ABI number (or -1 with errno); no memory is read or written.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(abi).unwrap_or(0)
}
