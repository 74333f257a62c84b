//! `ls`: golden cases 5 and 6 (one level, links never directories, the verbatim prefix, errors).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::expect::{ls_error, ls_ok, ls_sorted};
use crate::harness::{Suite, write_file};

/// Golden cases 5 and 6: `a`, `.hid`, `sub/deep/`, `ln → sub`, `bad → nowhere`.
fn build_t_ls(t: &Path) {
    write_file(t.join("a"), "a");
    write_file(t.join(".hid"), "h");
    std::fs::create_dir_all(t.join("sub/deep")).unwrap();
    symlink(t.join("sub"), t.join("ln")).unwrap();
    symlink("nowhere", t.join("bad")).unwrap();
}

pub async fn golden_05_06_ls_one_level_links_and_errors(s: Suite) {
    let (dir, t) = s.fixture("t");
    build_t_ls(&dir);

    // 5: dot-files included, links never directories, any order.
    let got = s.ls(&format!("{t}/")).await;
    let want = ls_ok(vec![
        (format!("{t}/a"), false),
        (format!("{t}/.hid"), false),
        (format!("{t}/sub"), true),
        (format!("{t}/ln"), false),
        (format!("{t}/bad"), false),
    ]);
    s.check("5 ls(T/)", &ls_sorted(got), &want);
    // Without the trailing slash the prefix gains one `/`.
    let got = s.ls(&t).await;
    let want = ls_ok(vec![
        (format!("{t}/a"), false),
        (format!("{t}/.hid"), false),
        (format!("{t}/sub"), true),
        (format!("{t}/ln"), false),
        (format!("{t}/bad"), false),
    ]);
    s.check("5 ls(T)", &ls_sorted(got), &want);

    // 6: the prefix is verbatim; errors.
    s.check(
        "6 ls(T//sub)",
        &s.ls(&format!("{t}//sub")).await,
        &ls_ok(vec![(format!("{t}//sub/deep"), true)]),
    );
    s.check("6 ls(T/a)", &s.ls(&format!("{t}/a")).await, &ls_error(format!("Path '{t}/a': not_a_directory")));
    s.check("6 ls(\"\")", &s.ls("").await, &ls_error("Path '': path_not_found".to_owned()));
    s.check(
        "ls(missing)",
        &s.ls(&format!("{t}/missing")).await,
        &ls_error(format!("Path '{t}/missing': path_not_found")),
    );
    // A relative path resolves against the working directory and is echoed verbatim.
    s.check("ls(relative)", &s.ls("t/sub").await, &ls_ok(vec![("t/sub/deep".to_owned(), true)]));
    s.check("ls(relative/)", &s.ls("t//sub/").await, &ls_ok(vec![("t//sub/deep".to_owned(), true)]));
    s.finish();
}
