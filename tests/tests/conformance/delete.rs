//! `delete`: golden cases 33 and 34 (links, permissions) and the edges (trees, refusals, relative
//! paths).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::expect::{delete_error, delete_req, deleted};
use crate::harness::{Suite, as_delete, is_root, make_writable, set_mode, write_file};

pub async fn golden_33_34_delete_links_and_permissions(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 33.
    let setup = |d: &Path| {
        write_file(d.join("f"), b"x");
        write_file(d.join("sub/keep"), b"k");
        symlink(d.join("sub/"), d.join("ln")).unwrap();
        symlink("nowhere", d.join("bad")).unwrap();
    };
    let (f, ln, bad) = (format!("{t}/f"), format!("{t}/ln"), format!("{t}/bad"));
    let got =
        s.mutate(&dir, setup, &[delete_req(&f), delete_req(&f), delete_req(&ln), delete_req(&bad)]).await;
    s.check("33 delete(f)", &as_delete(&got[0]), &deleted(&f));
    s.check("33 delete(f) again", &as_delete(&got[1]), &delete_error(format!("Error: '{f}' not found")));
    s.check("33 delete(ln)", &as_delete(&got[2]), &deleted(&ln));
    s.check("33 delete(bad)", &as_delete(&got[3]), &deleted(&bad));
    s.ensure(
        "33 links removed",
        std::fs::symlink_metadata(&ln).is_err() && std::fs::symlink_metadata(&bad).is_err(),
        "a link survived",
    );
    s.check("33 T/sub intact", &std::fs::read(dir.join("sub/keep")).ok(), &Some(b"k".to_vec()));

    // 34: `T/ro/` mode 555 holding `f`; `T/locked/` mode 000.
    let setup = |d: &Path| {
        write_file(d.join("ro/f"), b"x");
        set_mode(d.join("ro"), 0o555);
        std::fs::create_dir(d.join("locked")).unwrap();
        set_mode(d.join("locked"), 0o000);
    };
    let (ro_f, inner) = (format!("{t}/ro/f"), format!("{t}/locked/inner"));
    let got = s.mutate(&dir, setup, &[delete_req(&ro_f), delete_req(&inner)]).await;
    if is_root() {
        // As root, permissions do not stop the removal (the reference's row is for non-root).
        s.check("34 (root) delete(T/ro/f)", &as_delete(&got[0]), &deleted(&ro_f));
        s.ensure("34 (root) T/ro/f removed", !dir.join("ro/f").exists(), "still there");
    } else {
        s.check(
            "34 delete(T/ro/f)",
            &as_delete(&got[0]),
            &delete_error(format!(
                "Error deleting file '{ro_f}': rm: cannot remove '{ro_f}': Permission denied"
            )),
        );
    }
    // `inner` does not exist; non-root cannot even tell (quirk): "not found" either way.
    s.check(
        "34 delete(T/locked/inner)",
        &as_delete(&got[1]),
        &delete_error(format!("Error: '{inner}' not found")),
    );
    make_writable(&dir);
    s.finish();
}

pub async fn edge_delete_trees_links_refusals_and_relative_paths(s: Suite) {
    let (dir, t) = s.fixture("t");

    // A tree holding a link to a file outside it: the tree goes, the target stays.
    let setup = |d: &Path| {
        write_file(d.join("outside.txt"), b"o");
        write_file(d.join("tree/a/b/c.txt"), b"c");
        write_file(d.join("tree/.hidden"), b"h");
        symlink("../outside.txt", d.join("tree/out")).unwrap();
        symlink(d.join("outside.txt"), d.join("tree/a/abs")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/tree"))]).await;
    s.check("delete a tree", &as_delete(&got[0]), &deleted(&format!("{t}/tree")));
    s.ensure("tree gone", !dir.join("tree").exists(), "tree exists");
    s.check("link target intact", &std::fs::read(dir.join("outside.txt")).ok(), &Some(b"o".to_vec()));

    // A link loop is a link: removed, its partner kept.
    let setup = |d: &Path| {
        symlink("loop2", d.join("loop1")).unwrap();
        symlink("loop1", d.join("loop2")).unwrap();
    };
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/loop1"))]).await;
    s.check("delete a link loop", &as_delete(&got[0]), &deleted(&format!("{t}/loop1")));
    s.ensure("loop2 kept", std::fs::symlink_metadata(dir.join("loop2")).is_ok(), "loop2 gone");

    // Relative paths and `.` / `..` refusals.
    let setup = |d: &Path| write_file(d.join("r.txt"), b"r");
    let got = s.mutate(&dir, setup, &[delete_req("t/r.txt"), delete_req("t/r.txt")]).await;
    s.check("relative delete", &as_delete(&got[0]), &deleted("t/r.txt"));
    s.check(
        "relative delete again",
        &as_delete(&got[1]),
        &delete_error("Error: 't/r.txt' not found".to_owned()),
    );
    let got = s.mutate(&dir, setup, &[delete_req(&format!("{t}/.")), delete_req(&format!("{t}/.."))]).await;
    s.check(
        "delete T/.",
        &as_delete(&got[0]),
        &delete_error(format!(
            "Error deleting file '{t}/.': rm: refusing to remove '.' or '..' directory: skipping '{t}/.'"
        )),
    );
    s.check(
        "delete T/..",
        &as_delete(&got[1]),
        &delete_error(format!(
            "Error deleting file '{t}/..': rm: refusing to remove '.' or '..' directory: skipping '{t}/..'"
        )),
    );
    s.ensure("T survives", dir.join("r.txt").exists(), "T/r.txt gone");
    let got = s.mutate(&dir, setup, &[delete_req("")]).await;
    s.check("delete \"\"", &as_delete(&got[0]), &delete_error("Error: '' not found".to_owned()));
    s.finish();
}
