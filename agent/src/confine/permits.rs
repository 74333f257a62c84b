//! A profile's `permissions` and `allowed_commands` as landlock rules: what the kernel withholds,
//! what it grants back, and which files it lets a command execute.
//!
//! **Permissions.** Each rule's globs become subtrees ([`crate::permission::Shape`]): a plain
//! prefix is its path; any other glob is looked for beneath its anchor when the plan is made
//! ([`matches_now`]), so what matches it later is not covered (the report says `partial`, naming
//! the rule). [`crate::permission::boundaries`] says, per operation, where the decision changes:
//! a denied subtree is withheld like agentd's own secrets ([`super::carve`]), an allowed one inside
//! it is granted back (its rights only where the roots grant them). What landlock's model costs:
//! the directories on the way to a write-denied subtree lose their create and remove rights too
//! (a right granted to a directory holds for everything beneath it), which the report notes.
//!
//! **Programs.** With `allowed_commands`, no grant carries the execute right; it is granted only
//! to the shell, each listed program (found on `PATH`, or absolute; symlinks followed) and the
//! ELF interpreters they name (`PT_INTERP`). A copied binary is a new file without the right.
//! Not covered, and said in the report: an allowed interpreter runs whatever its language can, and
//! the dynamic loader, which must be executable for any dynamic program to start, loads any
//! program it is handed (`ld.so /usr/bin/curl`).

use std::path::{Path, PathBuf};

use agentd_protocol::permission::Operation;
use agentd_protocol::profile::SandboxProfile;
use landlock::{ABI, AccessFs, BitFlags};

use crate::permission::{Permissions, Shape, boundaries};

/// The rights withheld by a read deny: file content (and executing it, which reads it). Listing
/// directories stays, as for agentd's own secrets: a denied file's name shows, not its content.
pub fn read_rights() -> BitFlags<AccessFs> {
    AccessFs::ReadFile | AccessFs::Execute
}

/// Entries a pattern walk looks at before it stops (the rule is then reported partial).
const WALK_BUDGET: usize = 100_000;

/// What the kernel gets of the permission rules.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PermitPlan {
    /// Subtrees withheld, with the operation (read or write).
    pub denied: Vec<(PathBuf, Operation)>,
    /// Subtrees granted back inside denied ones.
    pub allowed: Vec<(PathBuf, Operation)>,
    /// Per rule: why the kernel covers less than its text says (empty: all of it).
    pub short: Vec<Vec<String>>,
    /// A rule's globs were looked for in the tree, or a prefix is missing: the plan is only right
    /// for now.
    pub volatile: bool,
}

/// The plan for `permissions` (compiled from `profile.permissions`). Looks at the file system.
pub fn plan_permissions(permissions: &Permissions) -> PermitPlan {
    let mut short = vec![Vec::new(); permissions.rules().count()];
    let mut volatile = false;
    let mut per_rule: Vec<Vec<PathBuf>> = Vec::new();
    for (index, shapes) in permissions.shapes().into_iter().enumerate() {
        let mut paths = Vec::new();
        for shape in shapes {
            match shape {
                Shape::Prefix(path) => match real(&path) {
                    Some(real) => paths.push(real),
                    None => {
                        // Looked for again before the next command, which then covers it.
                        volatile = true;
                        short[index].push(format!(
                            "{} does not exist now: if a command creates it, the kernel does not cover it \
                             for that command",
                            path.display()
                        ));
                    }
                },
                Shape::Pattern { anchor } => {
                    volatile = true;
                    let (found, complete) = matches_now(permissions, index, &anchor);
                    short[index].push(format!(
                        "not a plain prefix: the {} path(s) matching it when the command started are covered, \
                         files that match it later are not{}",
                        found.len(),
                        if complete { "" } else { " (the tree was too large to look through)" }
                    ));
                    paths.extend(found);
                }
            }
        }
        per_rule.push(paths);
    }
    let mut plan = PermitPlan { short, volatile, ..PermitPlan::default() };
    for operation in [Operation::Read, Operation::Write] {
        let targets: Vec<_> = permissions
            .rules()
            .zip(&per_rule)
            .map(|(rule, paths)| (rule.mode, rule.applies_to(operation), paths.clone()))
            .collect();
        for (path, allowed) in boundaries(&targets) {
            if allowed {
                plan.allowed.push((path, operation));
            } else {
                plan.denied.push((path, operation));
            }
        }
    }
    follow_links(&mut plan, &per_rule);
    plan
}

/// Denies the other names a denied file has in its own directory as the file is denied: a rule
/// protects the file, not one of its names, and a same-directory hard link (`ln .env notes.txt`)
/// needs only the right to create a file there, which landlock cannot withhold without refusing
/// every new file in that directory. A link in another directory needs `Refer` on both, which the
/// carve withholds ([`super::carve::Withheld::way_rights`]), so only one that existed before is
/// missed: the rules naming such a file are then short (`per_rule`: the paths each rule covers).
fn follow_links(plan: &mut PermitPlan, per_rule: &[Vec<PathBuf>]) {
    use std::os::unix::fs::MetadataExt as _;
    for (path, operation) in plan.denied.clone() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if meta.is_dir() || meta.nlink() < 2 {
            continue;
        }
        let Some(dir) = path.parent() else { continue };
        let mut names = 1;
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let other = entry.path();
            let same = entry.metadata().is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()));
            if !same || other == path {
                continue;
            }
            names += 1;
            if !plan.denied.contains(&(other.clone(), operation)) {
                plan.denied.push((other, operation));
            }
        }
        if names < meta.nlink() {
            let note = format!(
                "{} has {} hard links, {} outside its directory: the kernel covers only the names in it",
                path.display(),
                meta.nlink(),
                meta.nlink() - names
            );
            for (index, paths) in per_rule.iter().enumerate() {
                if paths.contains(&path) && !plan.short[index].contains(&note) {
                    plan.short[index].push(note.clone());
                }
            }
        }
    }
}

/// `path` with its symlinks followed, when it exists.
fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The paths beneath `anchor` rule `index` matches now (a matching directory stands for its
/// subtree), real; and whether the walk saw everything. Links are not followed.
fn matches_now(permissions: &Permissions, index: usize, anchor: &Path) -> (Vec<PathBuf>, bool) {
    let mut found = Vec::new();
    let mut budget = WALK_BUDGET;
    let mut stack = vec![anchor.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            if budget == 0 {
                return (found, false);
            }
            budget -= 1;
            let path = entry.path();
            // The kernel's own trees hold nothing a rule is about, and are huge.
            if dir == Path::new("/") && ["proc", "sys", "dev"].iter().any(|s| entry.file_name() == *s) {
                continue;
            }
            let text = path.to_string_lossy();
            if permissions.rule_matches(index, &text) {
                found.extend(real(&path));
            } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    (found, true)
}

/// The files commands may execute under `allowed_commands`: the shell, each program, and the ELF
/// interpreters they name; with what could not be found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Programs {
    pub files: Vec<PathBuf>,
    pub interpreters: Vec<PathBuf>,
    pub missing: Vec<String>,
}

/// Resolves `allowed` on `path` (the `PATH` commands get) as the shell will when the command
/// starts. Looks at the file system.
pub fn resolve_programs(allowed: &[String], path: &str) -> Programs {
    let mut out = Programs::default();
    let add = |file: PathBuf, out: &mut Programs| {
        if !out.files.contains(&file) {
            out.files.push(file);
        }
    };
    if let Some(shell) = real(Path::new("/bin/sh")) {
        add(shell, &mut out);
    }
    for name in allowed {
        let found = if name.contains('/') {
            Path::new(name).is_absolute().then(|| real(Path::new(name))).flatten().filter(|p| executable(p))
        } else {
            path.split(':')
                .filter(|dir| !dir.is_empty())
                .map(|dir| Path::new(dir).join(name))
                .find(|candidate| executable(candidate))
                .and_then(|p| real(&p))
        };
        match found {
            Some(file) => add(file, &mut out),
            None => out.missing.push(name.clone()),
        }
    }
    let mut interpreters = Vec::new();
    for file in &out.files {
        for interpreter in interpreter_of(file).into_iter().filter_map(|i| real(&i)) {
            // A script's interpreter may be dynamic itself.
            let nested = interpreter_of(&interpreter).into_iter().filter_map(|i| real(&i));
            for one in std::iter::once(interpreter.clone()).chain(nested) {
                if !interpreters.contains(&one) && !out.files.contains(&one) {
                    interpreters.push(one);
                }
            }
        }
    }
    out.interpreters = interpreters;
    out
}

fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The interpreter `file` names: an ELF's `PT_INTERP`, or a script's `#!` program.
fn interpreter_of(file: &Path) -> Option<PathBuf> {
    use std::io::Read as _;
    let mut head = Vec::new();
    std::fs::File::open(file).ok()?.take(64 * 1024).read_to_end(&mut head).ok()?;
    if let Some(line) = head.strip_prefix(b"#!") {
        let line = line.split(|b| *b == b'\n').next()?;
        let text = String::from_utf8_lossy(line);
        return text.split_whitespace().next().map(PathBuf::from);
    }
    elf_interp(&head).map(PathBuf::from)
}

/// `PT_INTERP` of an ELF image whose program headers are in `head`. Pure.
pub fn elf_interp(head: &[u8]) -> Option<String> {
    if head.get(..4)? != b"\x7fELF" {
        return None;
    }
    let wide = *head.get(4)? == 2;
    let little = *head.get(5)? == 1;
    let num = |at: usize, len: usize| -> Option<u64> {
        let bytes = head.get(at..at.checked_add(len)?)?;
        let mut value = 0u64;
        for (i, b) in bytes.iter().enumerate() {
            let shift = if little { i } else { len - 1 - i };
            value |= u64::from(*b) << (8 * shift);
        }
        Some(value)
    };
    let (phoff, phentsize, phnum) = if wide {
        (num(0x20, 8)?, num(0x36, 2)?, num(0x38, 2)?)
    } else {
        (num(0x1c, 4)?, num(0x2a, 2)?, num(0x2c, 2)?)
    };
    const PT_INTERP: u64 = 3;
    for i in 0..phnum {
        let at = usize::try_from(phoff.checked_add(i.checked_mul(phentsize)?)?).ok()?;
        if num(at, 4)? != PT_INTERP {
            continue;
        }
        let (offset, size) = if wide {
            (num(at.checked_add(8)?, 8)?, num(at.checked_add(0x20)?, 8)?)
        } else {
            (num(at.checked_add(4)?, 4)?, num(at.checked_add(0x10)?, 4)?)
        };
        let start = usize::try_from(offset).ok()?;
        let bytes = head.get(start..start.checked_add(usize::try_from(size).ok()?)?)?;
        let text = bytes.split(|b| *b == 0).next()?;
        return String::from_utf8(text.to_vec()).ok();
    }
    None
}

/// The `PATH` a command under `profile` gets, for resolving its programs: the profile's `env`,
/// else `fallback` (the sandbox user's or agentd's).
pub fn command_path(profile: &SandboxProfile, fallback: Option<&str>) -> String {
    profile
        .env
        .get("PATH")
        .cloned()
        .or_else(|| fallback.map(str::to_owned))
        .or_else(|| std::env::var("PATH").ok())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_owned())
}

/// Whether a ruleset is needed for the rules alone.
pub fn wanted(profile: &SandboxProfile) -> bool {
    !profile.permissions.is_empty() || profile.allowed_commands.is_some()
}

/// The rights of `operation` at this ABI.
pub fn rights(operation: Operation, abi: ABI) -> BitFlags<AccessFs> {
    match operation {
        Operation::Read => read_rights(),
        Operation::Write => AccessFs::from_write(abi),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loader_of_this_test_binary_is_found() {
        let me = std::env::current_exe().unwrap();
        let interp = interpreter_of(&me);
        // Built static (crt-static) there is none; dynamic, it is an absolute loader path.
        if let Some(interp) = interp {
            assert!(interp.is_absolute() && interp.exists(), "{}", interp.display());
        }
        let sh = resolve_programs(&["ls".to_owned(), "no-such-program-x".to_owned()], "/usr/bin:/bin");
        assert!(sh.files.iter().any(|f| f.ends_with("ls")), "{sh:?}");
        assert_eq!(sh.missing, vec!["no-such-program-x".to_owned()]);
        assert!(!sh.interpreters.is_empty(), "ls is dynamic on this machine: {sh:?}");
    }

    /// A denied file's other names in its directory are denied as it is; a name elsewhere cannot be
    /// found, and the rule says so.
    #[test]
    fn hard_links_of_a_denied_file_are_followed_in_its_directory() {
        use agentd_protocol::permission::{PermissionMode, PermissionRule};
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        std::fs::create_dir(w.join("pub")).unwrap();
        std::fs::write(w.join(".env"), "secret").unwrap();
        std::fs::write(w.join("other"), "open").unwrap();
        std::fs::hard_link(w.join(".env"), w.join("notes.txt")).unwrap();
        let rules = Permissions::new(&[PermissionRule {
            operations: vec![Operation::Read],
            paths: vec![format!("{}/.env", w.display())],
            mode: PermissionMode::Deny,
        }])
        .unwrap();
        let plan = plan_permissions(&rules);
        assert_eq!(
            plan.denied,
            vec![(w.join(".env"), Operation::Read), (w.join("notes.txt"), Operation::Read)]
        );
        assert_eq!(plan.short, vec![Vec::<String>::new()]);
        std::fs::hard_link(w.join(".env"), w.join("pub/old")).unwrap();
        let plan = plan_permissions(&rules);
        assert_eq!(plan.denied.len(), 2, "{plan:?}");
        assert_eq!(
            plan.short[0],
            vec![format!(
                "{}/.env has 3 hard links, 1 outside its directory: the kernel covers only the names in it",
                w.display()
            )]
        );
    }

    #[test]
    fn elf_headers_that_lie_are_refused() {
        assert_eq!(elf_interp(b"\x7fELF"), None);
        let mut bogus = vec![0u8; 64];
        bogus[..4].copy_from_slice(b"\x7fELF");
        bogus[4] = 2;
        bogus[5] = 1;
        bogus[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        bogus[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(elf_interp(&bogus), None);
    }
}
