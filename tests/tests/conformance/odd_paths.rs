//! Odd paths through every verb: names with spaces, `:`, newlines and non-UTF-8 bytes; NUL in a
//! path; symlinks in `ls` and `delete`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::symlink;
use std::path::Path;

use agentd_protocol::fs::ReadResult;

use crate::expect::{
    delete_req, deleted, edit_req, edited, found, gm, hits, ls_error, ls_ok, ls_sorted, page, write_req,
    written,
};
use crate::harness::{Suite, as_delete, as_edit, as_write, write_file};

pub async fn edge_odd_file_names_through_every_verb(s: Suite) {
    let (dir, t) = s.fixture("names");
    let names = ["a b.txt", "c:d.txt", "e\nf.txt"];
    let setup = |d: &Path| {
        for (i, name) in names.iter().enumerate() {
            write_file(d.join(name), format!("needle {i}\n"));
        }
        write_file(d.join(OsStr::from_bytes(b"g\xffh.txt")), "needle 3\n");
    };
    setup(&dir);

    // ls: the UTF-8 names exactly; the non-UTF-8 one is implementation-defined (both must agree).
    let listed = s.ls(&t).await;
    let paths: Vec<String> = listed.entries.iter().flatten().map(|e| e.path.clone()).collect();
    s.ensure(
        "ls names: four entries, the UTF-8 ones verbatim",
        listed.error.is_none()
            && paths.len() == 4
            && names.iter().all(|n| paths.contains(&format!("{t}/{n}")))
            && listed.entries.iter().flatten().all(|e| !e.is_dir),
        &listed,
    );

    // read.
    for (i, name) in names.iter().enumerate() {
        let p = format!("{t}/{name}");
        s.check(
            format!("read {name:?}"),
            &s.read(&p, 0, 2000).await,
            &page(&format!("needle {i}"), Some(1), 1, 1, None),
        );
    }

    // grep, route A and B; glob.
    let got = s.grep_a("needle", Some(&t), None, None).await;
    let matches = got.matches.clone().unwrap_or_default();
    s.ensure(
        "grep names: the UTF-8 names verbatim, four matches",
        got.error.is_none()
            && matches.len() == 4
            && names
                .iter()
                .enumerate()
                .all(|(i, n)| matches.contains(&gm(format!("{t}/{n}"), 1, &format!("needle {i}")))),
        &got,
    );
    let got = s.grep_b("needle", Some(&t), Some("/*.txt"), None).await;
    let matches = got.matches.clone().unwrap_or_default();
    s.ensure(
        "grep names route B: the UTF-8 names verbatim, in order",
        got.error.is_none()
            && matches.len() >= 3
            && matches[..3]
                == names
                    .iter()
                    .enumerate()
                    .map(|(i, n)| gm(format!("{t}/{n}"), 1, &format!("needle {i}")))
                    .collect::<Vec<_>>()[..],
        &got,
    );
    let got = s.glob("*.txt", Some(&t)).await;
    let matches: Vec<String> = got.matches.iter().flatten().map(|m| m.path.clone()).collect();
    s.ensure(
        "glob names: the UTF-8 names verbatim, sorted first",
        got.error.is_none()
            && !got.truncated
            && matches.len() >= 3
            && matches[..3] == names.iter().map(|n| format!("{t}/{n}")).collect::<Vec<_>>()[..],
        &got,
    );
    let got = s.glob("*:*", Some(&t)).await;
    s.check("glob *:*", &got, &found(&t, "c:d.txt"));

    // write, edit, delete.
    let new = format!("{t}/new file: x\ny.txt");
    let got = s.mutate(&dir, setup, &[write_req(&new, "w\n")]).await;
    s.check("write an odd name", &as_write(&got[0]), &written(&new));
    s.check(
        "write an odd name: content",
        &std::fs::read(dir.join("new file: x\ny.txt")).ok(),
        &Some(b"w\n".to_vec()),
    );
    for name in names {
        let p = format!("{t}/{name}");
        let got = s.mutate(&dir, setup, &[edit_req(&p, "needle", "pin", false), delete_req(&p)]).await;
        s.check(format!("edit {name:?}"), &as_edit(&got[0]), &edited(&p, 1));
        s.check(format!("delete {name:?}"), &as_delete(&got[1]), &deleted(&p));
        s.ensure(format!("{name:?} gone"), !dir.join(name).exists(), "still there");
    }
    // A directory holding a non-UTF-8 name is removed whole.
    let got = s.mutate(&dir, setup, &[delete_req(&t)]).await;
    s.check("delete a tree with a non-UTF-8 name", &as_delete(&got[0]), &deleted(&t));
    s.ensure("tree gone", !dir.exists(), "still there");
    std::fs::create_dir_all(&dir).unwrap();
    s.finish();
}

pub async fn edge_nul_in_a_path(s: Suite) {
    let (dir, t) = s.fixture("t");
    write_file(dir.join("a"), b"a");
    let p = format!("{t}/a\0b");

    // Each verb must refuse (an `invalid_path` error, or its own "not found") and touch nothing.
    let acceptable = |error: &Option<String>, not_found: &str| {
        error.as_deref().is_some_and(|e| e.contains("invalid_path") || e == not_found)
    };
    let got = s.ls(&p).await;
    s.ensure(
        "ls NUL",
        got.entries.is_none() && acceptable(&got.error, &format!("Path '{p}': path_not_found")),
        &got,
    );
    let got = s.read(&p, 0, 2000).await;
    s.ensure(
        "read NUL",
        got == ReadResult::error(got.error.clone().unwrap_or_default())
            && acceptable(&got.error, &format!("File '{p}': file_not_found")),
        &got,
    );
    let got =
        as_write(&s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[write_req(&p, "x")]).await[0]);
    s.ensure("write NUL", got.path.is_none() && acceptable(&got.error, "-"), &got);
    let got = as_edit(
        &s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[edit_req(&p, "a", "b", false)]).await[0],
    );
    s.ensure(
        "edit NUL",
        got.path.is_none() && acceptable(&got.error, &format!("Error: File '{p}' not found")),
        &got,
    );
    let got =
        as_delete(&s.mutate(&dir, |d: &Path| write_file(d.join("a"), b"a"), &[delete_req(&p)]).await[0]);
    s.ensure(
        "delete NUL",
        got.path.is_none() && acceptable(&got.error, &format!("Error: '{p}' not found")),
        &got,
    );
    s.ensure("T/a untouched", std::fs::read(dir.join("a")).ok() == Some(b"a".to_vec()), "changed");
    // grep swallows a missing root (`[]`, no error); an `invalid_path` error is also acceptable.
    let got = s.grep_a("a", Some(&p), None, None).await;
    s.ensure(
        "grep NUL root",
        got == hits(vec![], false) || (got.matches.is_none() && acceptable(&got.error, "-")),
        &got,
    );
    let got = s.glob("*", Some(&p)).await;
    s.ensure(
        "glob NUL root",
        got.matches.is_none() && acceptable(&got.error, &format!("Path '{p}': path_not_found")),
        &got,
    );
    s.finish();
}

pub async fn edge_symlinks_in_ls_and_delete(s: Suite) {
    let (dir, t) = s.fixture("t");
    write_file(dir.join("sub/x"), b"x");
    std::fs::create_dir(dir.join("sub/inner")).unwrap();
    write_file(dir.join("file"), b"f");
    symlink("sub", dir.join("ln")).unwrap();
    symlink("file", dir.join("lnf")).unwrap();
    symlink("nowhere", dir.join("bad")).unwrap();
    symlink(dir.join("ln"), dir.join("ln2")).unwrap();

    // A link given as the path is followed (through two links too); below it links stay links.
    let want = ls_ok(vec![(format!("{t}/ln/x"), false), (format!("{t}/ln/inner"), true)]);
    s.check("ls(link to dir)", &ls_sorted(s.ls(&format!("{t}/ln")).await), &want);
    let want = ls_ok(vec![(format!("{t}/ln2/x"), false), (format!("{t}/ln2/inner"), true)]);
    s.check("ls(link to link to dir)", &ls_sorted(s.ls(&format!("{t}/ln2")).await), &want);
    s.check(
        "ls(link to file)",
        &s.ls(&format!("{t}/lnf")).await,
        &ls_error(format!("Path '{t}/lnf': not_a_directory")),
    );
    s.check(
        "ls(dangling link)",
        &s.ls(&format!("{t}/bad")).await,
        &ls_error(format!("Path '{t}/bad': path_not_found")),
    );
    s.check(
        "ls(T/file/)",
        &s.ls(&format!("{t}/file/")).await,
        &ls_error(format!("Path '{t}/file/': not_a_directory")),
    );

    // delete removes links, never their targets.
    let setup = |d: &Path| {
        write_file(d.join("sub/x"), b"x");
        write_file(d.join("file"), b"f");
        symlink("sub", d.join("ln")).unwrap();
        symlink("file", d.join("lnf")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/ln")), delete_req(&format!("{t}/lnf"))]).await;
    s.check("delete(link to dir)", &as_delete(&got[0]), &deleted(&format!("{t}/ln")));
    s.check("delete(link to file)", &as_delete(&got[1]), &deleted(&format!("{t}/lnf")));
    s.check(
        "targets intact",
        &(std::fs::read(dir.join("sub/x")).ok(), std::fs::read(dir.join("file")).ok()),
        &(Some(b"x".to_vec()), Some(b"f".to_vec())),
    );
    // Through a link to a directory, an entry of the target is removed.
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/ln/x"))]).await;
    s.check("delete(T/ln/x)", &as_delete(&got[0]), &deleted(&format!("{t}/ln/x")));
    s.ensure("T/sub/x removed, link kept", !dir.join("sub/x").exists() && dir.join("ln").exists(), "state");
    s.finish();
}
