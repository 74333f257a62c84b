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
//! Landlock grants an inode what was resolved when the ruleset was made, so a program is granted
//! only when no step of its resolution (the `PATH` directory, each symlink, the file) is one a
//! command can change ([`Writable`]): a link in the workspace re-pointed after the grant would
//! otherwise carry the right to whatever it names next. A multi-call program (busybox) answers to
//! every applet's name, so granting it grants them all: the report names them ([`Programs::multi_call`]).
//! Not covered, and said in the report: an allowed interpreter runs whatever its language can, and
//! the dynamic loader, which must be executable for any dynamic program to start, loads any
//! program it is handed (`ld.so /usr/bin/curl`). memfds, which landlock does not see, are the
//! seccomp filter's ([`super::seccomp`]).

use std::path::{Path, PathBuf};

use agentd_protocol::permission::{Operation, PermissionMode};
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
    let modes: Vec<_> = permissions.rules().map(|rule| rule.mode).collect();
    for (index, shapes) in permissions.shapes().into_iter().enumerate() {
        let mut paths = Vec::new();
        for shape in shapes {
            match shape {
                Shape::Prefix(path) => match real(&path) {
                    Some(real) => paths.push(real),
                    None => {
                        // An allowed name missing inside a denied subtree keeps its name all the
                        // same: a denied file renamed to it would be granted from the next command.
                        if modes.get(index) == Some(&PermissionMode::Allow) {
                            paths.extend(real_parent(&path));
                        }
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
    for (path, operation) in plan.denied.clone() {
        let Some((nlink, others)) = names_beside(&path) else { continue };
        let names = 1 + others.len() as u64;
        for other in others {
            if !plan.denied.contains(&(other.clone(), operation)) {
                plan.denied.push((other, operation));
            }
        }
        if names < nlink {
            let note = format!(
                "{} has {nlink} hard links, {} outside its directory: the kernel covers only the names in it",
                path.display(),
                nlink - names
            );
            for (index, paths) in per_rule.iter().enumerate() {
                if paths.contains(&path) && !plan.short[index].contains(&note) {
                    plan.short[index].push(note.clone());
                }
            }
        }
    }
    // An allowed file with another name beside it that is denied (`ln conf/.env conf/public.txt`
    // while an allowed public.txt was missing): granting it would grant that file, whose rights the
    // kernel keeps on the file, not on a name.
    for (path, operation) in plan.allowed.clone() {
        let Some((_, others)) = names_beside(&path) else { continue };
        if others.iter().any(|other| denied_in(plan, other, operation)) {
            plan.allowed.retain(|allowed| *allowed != (path.clone(), operation));
            if !plan.denied.contains(&(path.clone(), operation)) {
                plan.denied.push((path, operation));
            }
        }
    }
}

/// For a file with more than one link: its link count and its other names in its own directory.
fn names_beside(path: &Path) -> Option<(u64, Vec<PathBuf>)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::symlink_metadata(path).ok()?;
    let dir = path.parent().filter(|_| !meta.is_dir() && meta.nlink() >= 2)?;
    let others = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| (entry.path(), entry.metadata()))
        .filter(|(other, m)| {
            other != path && m.as_ref().is_ok_and(|m| (m.dev(), m.ino()) == (meta.dev(), meta.ino()))
        })
        .map(|(other, _)| other)
        .collect();
    Some((meta.nlink(), others))
}

/// Whether the plan denies `operation` on `path`: the deepest boundary above it is a denied one.
fn denied_in(plan: &PermitPlan, path: &Path, operation: Operation) -> bool {
    let deepest = |list: &[(PathBuf, Operation)]| {
        list.iter()
            .filter(|(p, o)| *o == operation && path.starts_with(p))
            .map(|(p, _)| p.components().count())
            .max()
    };
    match (deepest(&plan.denied), deepest(&plan.allowed)) {
        (Some(denied), Some(allowed)) => denied > allowed,
        (denied, _) => denied.is_some(),
    }
}

/// `path` with its symlinks followed, when it exists.
fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// `path`, missing, beneath its real parent, when that exists.
fn real_parent(path: &Path) -> Option<PathBuf> {
    Some(real(path.parent()?)?.join(path.file_name()?))
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
/// interpreters they name; with what could not be found, what was not granted, and which granted
/// files answer to other names.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Programs {
    pub files: Vec<PathBuf>,
    pub interpreters: Vec<PathBuf>,
    pub missing: Vec<String>,
    /// Names (or interpreters) not granted, with the step of their resolution commands can change.
    pub changeable: Vec<(String, PathBuf)>,
    /// Granted files that are multi-call programs, with the other names they answer to.
    pub multi_call: Vec<(PathBuf, Vec<String>)>,
}

/// Where commands can change the file system, as far as the programs' resolution cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Writable {
    /// Beneath these roots (real paths): landlock refuses every write elsewhere.
    Roots(Vec<PathBuf>),
    /// No writable roots: wherever the file modes let the command's `(uid, gid)` write (`None`: a
    /// user whose capabilities write everywhere).
    Modes(Option<(u32, u32)>),
}

impl Writable {
    /// For `profile`'s commands, which run as `writer` when they may write beyond the roots.
    pub fn of(profile: &SandboxProfile, writer: Option<(u32, u32)>) -> Self {
        match &profile.writable_roots {
            Some(roots) => Self::Roots(
                roots.iter().map(|root| real(Path::new(root)).unwrap_or_else(|| root.into())).collect(),
            ),
            None => Self::Modes(writer),
        }
    }

    /// Whether a command can change `path` (one step of a resolution, a real path: its ancestors
    /// are steps too): write into it, or replace it.
    fn changeable(&self, path: &Path) -> bool {
        match self {
            Self::Roots(roots) => roots.iter().any(|root| path.starts_with(root)),
            Self::Modes(None) => true,
            Self::Modes(Some((uid, gid))) => {
                use std::os::unix::fs::MetadataExt as _;
                // A link's own mode means nothing: what counts is its directory, a step too.
                std::fs::symlink_metadata(path).is_ok_and(|meta| {
                    !meta.file_type().is_symlink() && {
                        let mode = meta.mode();
                        if meta.uid() == *uid {
                            mode & 0o200 != 0
                        } else if meta.gid() == *gid {
                            mode & 0o020 != 0
                        } else {
                            mode & 0o002 != 0
                        }
                    }
                })
            }
        }
    }
}

/// Resolves `allowed` on `path` (the `PATH` commands get) as the shell will when the command
/// starts, granting only what no command can change (`writable`). Looks at the file system.
pub fn resolve_programs(allowed: &[String], path: &str, writable: &Writable) -> Programs {
    let mut out = Programs::default();
    // Per granted file, the names it was granted as.
    let mut granted_as: Vec<(PathBuf, Vec<String>)> = Vec::new();
    let mut grant = |name: &str, found: Option<Resolved>, out: &mut Programs| -> Option<PathBuf> {
        let Some(found) = found else {
            out.missing.push(name.to_owned());
            return None;
        };
        if let Some(step) = found.steps.iter().find(|step| writable.changeable(step)) {
            out.changeable.push((name.to_owned(), step.clone()));
            return None;
        }
        match granted_as.iter_mut().find(|(file, _)| *file == found.real) {
            Some((_, names)) => names.push(name.to_owned()),
            None => granted_as.push((found.real.clone(), vec![name.to_owned()])),
        }
        Some(found.real)
    };
    if let Some(shell) = grant("sh", walk(Path::new("/bin/sh")), &mut out) {
        out.files.push(shell);
    }
    for name in allowed {
        let found = if name.contains('/') {
            Path::new(name)
                .is_absolute()
                .then(|| walk(Path::new(name)))
                .flatten()
                .filter(|p| executable(&p.real))
        } else {
            // The shell takes the first executable match; a relative entry is the command's own
            // directory, where nothing has the execute right.
            path.split(':')
                .filter(|dir| Path::new(dir).is_absolute())
                .map(|dir| Path::new(dir).join(name))
                .find(|candidate| executable(candidate))
                .and_then(|p| walk(&p))
        };
        if let Some(file) = grant(name, found, &mut out)
            && !out.files.contains(&file)
        {
            out.files.push(file);
        }
    }
    let mut interpreters = Vec::new();
    let mut queue: Vec<PathBuf> = out.files.clone();
    while let Some(file) = queue.pop() {
        // A script's interpreter may be dynamic itself.
        let Some(interpreter) = interpreter_of(&file) else { continue };
        let shown = interpreter.display().to_string();
        let Some(found) = grant(&shown, walk(&interpreter), &mut out) else {
            // An interpreter that is missing is a program that cannot start, not a name asked for.
            out.missing.retain(|m| *m != shown);
            continue;
        };
        if !interpreters.contains(&found) && !out.files.contains(&found) {
            interpreters.push(found.clone());
            queue.push(found);
        }
    }
    out.interpreters = interpreters;
    let mut dirs: Vec<PathBuf> = STANDARD_BIN_DIRS.iter().map(PathBuf::from).collect();
    dirs.extend(path.split(':').filter(|dir| Path::new(dir).is_absolute()).map(PathBuf::from));
    dirs.extend(out.files.iter().filter_map(|file| file.parent().map(Path::to_path_buf)));
    let names = names_of(&granted_as.iter().map(|(file, _)| file.clone()).collect::<Vec<_>>(), &dirs);
    for ((file, asked), found) in granted_as.iter().zip(names) {
        let own = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let unrelated = !other_names(asked, &own, &found).is_empty();
        if let Some(others) = multi_call(asked, file, &found, unrelated && signed(file)) {
            out.multi_call.push((file.clone(), others));
        }
    }
    out
}

/// Where programs live on every layout, looked through for the other names of a granted file
/// besides the `PATH`'s directories.
const STANDARD_BIN_DIRS: [&str; 6] =
    ["/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"];

/// Programs that answer to each of their applets' names (`busybox id`, or `id` linked to it),
/// known by their file's name even where no link shows it.
const MULTI_CALL: [&str; 3] = ["busybox", "toybox", "coreutils"];

/// What the binaries of [`MULTI_CALL`] programs hold, for one renamed.
const SIGNATURES: [&[u8]; 2] = [b"BusyBox v", b"toybox"];

/// Bytes of a file looked through for [`SIGNATURES`] (busybox is about 2 MiB).
const SIGNED_READ: u64 = 16 << 20;

/// Unrelated names of one file past which it is taken for a multi-call program (busybox, toybox
/// and a single-binary coreutils each answer to more than a hundred; the aliases of ordinary
/// programs number a few).
const MANY_NAMES: usize = 20;

/// A path resolved as the kernel resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Resolved {
    /// The file, every symlink followed.
    real: PathBuf,
    /// Every path looked at on the way, each real up to its last component: the directories
    /// entered, each symlink, and the file.
    steps: Vec<PathBuf>,
}

/// `path` (absolute) resolved component by component, every symlink followed (at most 40, as the
/// kernel), with every step. `None`: it does not resolve.
fn walk(path: &Path) -> Option<Resolved> {
    use std::ffi::OsString;
    use std::path::Component;
    const MAX_LINKS: usize = 40;
    let parts = |path: &Path| -> Vec<OsString> {
        path.components()
            .filter_map(|c| match c {
                Component::Normal(part) => Some(part.to_owned()),
                Component::ParentDir => Some("..".into()),
                Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
            })
            .rev()
            .collect()
    };
    if !path.is_absolute() {
        return None;
    }
    let mut pending = parts(path);
    let mut real = PathBuf::from("/");
    let mut steps = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            real.pop();
            continue;
        }
        let next = real.join(&part);
        let meta = std::fs::symlink_metadata(&next).ok()?;
        steps.push(next.clone());
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return None;
            }
            let target = std::fs::read_link(&next).ok()?;
            if target.is_absolute() {
                real = PathBuf::from("/");
            }
            pending.extend(parts(&target));
        } else {
            real = next;
        }
    }
    Some(Resolved { real, steps })
}

/// The names each of `files` has in `dirs` (an entry that is the same file, or a symlink to it).
fn names_of(files: &[PathBuf], dirs: &[PathBuf]) -> Vec<Vec<String>> {
    use std::os::unix::fs::{DirEntryExt as _, MetadataExt as _};
    let ids: Vec<Option<(u64, u64)>> =
        files.iter().map(|f| std::fs::metadata(f).ok().map(|m| (m.dev(), m.ino()))).collect();
    let mut names = vec![Vec::new(); files.len()];
    let mut seen_dirs = Vec::new();
    for dir in dirs {
        let Some(dir) = real(dir).filter(|d| !seen_dirs.contains(d)) else { continue };
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let Ok(dev) = std::fs::metadata(&dir).map(|m| m.dev()) else { continue };
        seen_dirs.push(dir);
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            // A file's number is in its directory entry; only a link is looked up.
            let id = if kind.is_symlink() {
                std::fs::metadata(entry.path()).ok().map(|m| (m.dev(), m.ino()))
            } else if kind.is_file() {
                Some((dev, entry.ino()))
            } else {
                None
            };
            let Some(id) = id else { continue };
            for (at, _) in ids.iter().enumerate().filter(|(_, own)| **own == Some(id)) {
                let name = entry.file_name().to_string_lossy().into_owned();
                if !names[at].contains(&name) {
                    names[at].push(name);
                }
            }
        }
    }
    names
}

/// Whether `file`, granted as `asked` and found under `names`, is a multi-call program, and then
/// the names it answers to besides: a program known by its name or by what it holds (`signed`,
/// [`SIGNATURES`]), or one file under [`MANY_NAMES`] unrelated names. Fewer unrelated names are
/// taken for aliases (`nodejs`, `gmake`, `rbash`, `xzcat`, `view`), and versions, variants and
/// subcommands of the same name (`python3` for `python3.11`, `sh` for `dash`, `git-upload-pack`
/// for `git`) are not others at all. Pure.
fn multi_call(asked: &[String], file: &Path, names: &[String], signed: bool) -> Option<Vec<String>> {
    let own = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut others = other_names(asked, &own, names);
    let known = std::iter::once(&own).chain(names).find(|n| MULTI_CALL.contains(&stem(n).as_str()));
    if let Some(known) = known {
        others.push(format!("any of {}'s applets", stem(known)));
    } else if signed {
        others.push("any of its applets".to_owned());
    } else if others.len() < MANY_NAMES {
        return None;
    }
    Some(others)
}

/// The names among `names` that are not the program granted as `asked` whose file is named `own`,
/// sorted. Pure.
fn other_names(asked: &[String], own: &str, names: &[String]) -> Vec<String> {
    let bases: Vec<String> =
        asked.iter().map(|a| stem(a.rsplit('/').next().unwrap_or(a))).chain([stem(own)]).collect();
    // One name is the other, or the other with a part added after or before a dash
    // (`git-upload-pack`, `x86_64-linux-gnu-gcc`, `ld` for `ld-linux-x86-64`).
    let related =
        |a: &str, b: &str| a == b || a.starts_with(&format!("{b}-")) || a.ends_with(&format!("-{b}"));
    let same = |name: &str| {
        let name = stem(name);
        bases.iter().any(|base| related(&name, base) || related(base, &name))
    };
    let mut others: Vec<String> = names.iter().filter(|n| !same(n)).cloned().collect();
    others.sort();
    others.dedup();
    others
}

/// Whether `file` holds a multi-call program's mark ([`SIGNATURES`]); read only for files found
/// under unrelated names, at most [`SIGNED_READ`] bytes.
fn signed(file: &Path) -> bool {
    use std::io::Read as _;
    let mut content = Vec::new();
    let read = std::fs::File::open(file).and_then(|f| f.take(SIGNED_READ).read_to_end(&mut content));
    read.is_ok() && SIGNATURES.iter().any(|mark| content.windows(mark.len()).any(|w| w == *mark))
}

/// A program's name without its version or variant: `python3.11` → `python`, `gcc-12` → `gcc`,
/// `vim.basic` → `vim`. Pure.
fn stem(name: &str) -> String {
    let head = name.split('.').next().unwrap_or(name);
    let trimmed = head.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-' || c == '_');
    if trimmed.is_empty() { head.to_owned() } else { trimmed.to_owned() }
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
        let sh = resolve_programs(
            &["ls".to_owned(), "no-such-program-x".to_owned()],
            "/usr/bin:/bin",
            &Writable::Roots(Vec::new()),
        );
        assert!(sh.files.iter().any(|f| f.ends_with("ls")), "{sh:?}");
        assert_eq!(sh.missing, vec!["no-such-program-x".to_owned()]);
        assert!(!sh.interpreters.is_empty(), "ls is dynamic on this machine: {sh:?}");
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn versions_variants_subcommands_and_aliases_are_the_same_program() {
        for (asked, file, found) in [
            ("python3", "/usr/bin/python3.11", &["python3", "python3.11", "python"][..]),
            ("sh", "/usr/bin/dash", &["dash", "sh"]),
            ("git", "/usr/bin/git", &["git", "git-receive-pack", "git-upload-archive", "git-upload-pack"]),
            ("gcc", "/usr/bin/x86_64-linux-gnu-gcc-12", &["gcc", "gcc-12", "x86_64-linux-gnu-gcc"]),
            ("/usr/bin/ls", "/usr/bin/ls", &["ls"]),
            ("/lib64/ld-linux-x86-64.so.2", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", &["ld.so"]),
            // Aliases this project's machine has: a few unrelated names are not a multi-call program.
            ("vi", "/usr/bin/vim.basic", &["vi", "vim", "editor", "ex", "rview", "rvim", "view", "vimdiff"]),
            ("xz", "/usr/bin/xz", &["xz", "lzcat", "lzma", "unlzma", "unxz", "xzcat"]),
            ("node", "/usr/bin/node", &["node", "nodejs"]),
            ("awk", "/usr/bin/mawk", &["awk", "mawk", "nawk"]),
        ] {
            assert_eq!(multi_call(&names(&[asked]), Path::new(file), &names(found), false), None, "{asked}");
        }
    }

    #[test]
    fn a_multi_call_program_is_never_missed() {
        let is = |asked: &str, file: &str, found: &[&str], signed: bool| {
            multi_call(&names(&[asked]), Path::new(file), &names(found), signed)
        };
        // Known by a name it has, its own or a link's.
        let applets = ["busybox", "ls", "id", "wget", "nc"];
        let others = names(&["busybox", "id", "nc", "wget", "any of busybox's applets"]);
        assert_eq!(is("ls", "/w/bin/ls", &applets, false), Some(others));
        assert_eq!(
            is("ls", "/bin/busybox", &applets, false),
            Some(names(&["id", "nc", "wget", "any of busybox's applets"]))
        );
        // No link at all (Debian's busybox package).
        assert_eq!(
            is("busybox", "/usr/bin/busybox", &["busybox"], false),
            Some(names(&["any of busybox's applets"]))
        );
        assert_eq!(
            is("ls", "/usr/lib/cargo/bin/coreutils", &["ls", "cat"], false),
            Some(names(&["cat", "any of coreutils's applets"]))
        );
        // Renamed: known by what it holds, or by how many names it has.
        assert_eq!(is("ls", "/w/ls", &["ls", "id"], true), Some(names(&["id", "any of its applets"])));
        assert_eq!(is("ls", "/w/ls", &["ls", "id"], false), None);
        let many: Vec<String> = (0..MANY_NAMES).map(|i| format!("applet{i}x")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(is("ls", "/w/ls", &many, false).map(|o| o.len()), Some(MANY_NAMES));
    }

    #[test]
    fn stems_drop_versions_and_variants() {
        for (name, stem_of) in
            [("python3.11", "python"), ("gcc-12", "gcc"), ("vim.basic", "vim"), ("ls", "ls"), ("2to3", "2to")]
        {
            assert_eq!(stem(name), stem_of, "{name}");
        }
    }

    #[test]
    fn every_step_of_a_resolution_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        std::fs::create_dir(d.join("real")).unwrap();
        std::fs::write(d.join("real/prog"), "").unwrap();
        std::os::unix::fs::symlink("real", d.join("dirlink")).unwrap();
        std::os::unix::fs::symlink("../dirlink/prog", d.join("real/alias")).unwrap();
        let found = walk(&d.join("dirlink/alias")).unwrap();
        assert_eq!(found.real, d.join("real/prog"));
        for step in [d.join("dirlink"), d.join("real"), d.join("real/alias"), d.join("real/prog")] {
            assert!(found.steps.contains(&step), "{} not in {:?}", step.display(), found.steps);
        }
        // A root holding any step makes the program changeable; one beside them does not.
        let roots = Writable::Roots(vec![d.join("real")]);
        assert!(found.steps.iter().any(|s| roots.changeable(s)));
        assert!(!found.steps.iter().any(|s| Writable::Roots(vec![d.join("other")]).changeable(s)));
        std::os::unix::fs::symlink("loop", d.join("loop")).unwrap();
        assert_eq!(walk(&d.join("loop")), None);
        assert_eq!(walk(Path::new("relative")), None);
    }

    #[test]
    fn without_roots_the_modes_decide() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        std::fs::write(d.join("f"), "").unwrap();
        std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let stranger = Writable::Modes(Some((4_000_000_000, 4_000_000_000)));
        assert!(!stranger.changeable(&d) && !stranger.changeable(&d.join("f")));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(stranger.changeable(&d));
        assert!(Writable::Modes(None).changeable(Path::new("/usr/bin")));
    }

    /// An allowed name missing inside a denied subtree stays in the plan (its way keeps the name);
    /// once it is another name of a denied file beside it, it is denied as that file is.
    #[test]
    fn an_allowed_name_is_kept_while_missing_and_denied_once_linked_to_a_denied_file() {
        use agentd_protocol::permission::PermissionRule;
        let dir = tempfile::tempdir().unwrap();
        let w = dir.path().canonicalize().unwrap();
        std::fs::create_dir(w.join("conf")).unwrap();
        std::fs::write(w.join("conf/.env"), "secret").unwrap();
        let rule = |path: &str, mode| PermissionRule {
            operations: vec![Operation::Read],
            paths: vec![format!("{}/{path}", w.display())],
            mode,
        };
        let rules = Permissions::new(&[
            rule("conf/public.txt", PermissionMode::Allow),
            rule("conf/**", PermissionMode::Deny),
        ])
        .unwrap();
        let plan = plan_permissions(&rules);
        assert_eq!(plan.allowed, vec![(w.join("conf/public.txt"), Operation::Read)]);
        assert!(plan.volatile && !plan.short[0].is_empty(), "{plan:?}");
        std::fs::hard_link(w.join("conf/.env"), w.join("conf/public.txt")).unwrap();
        let plan = plan_permissions(&rules);
        assert_eq!(plan.allowed, vec![]);
        assert!(plan.denied.contains(&(w.join("conf/public.txt"), Operation::Read)), "{plan:?}");
        // A file of its own under that name is granted.
        std::fs::remove_file(w.join("conf/public.txt")).unwrap();
        std::fs::write(w.join("conf/public.txt"), "public").unwrap();
        assert_eq!(plan_permissions(&rules).allowed, vec![(w.join("conf/public.txt"), Operation::Read)]);
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
