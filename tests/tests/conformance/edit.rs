//! `edit`: golden cases 24–32 (matching forms and counts, errors, links, large payloads) and the
//! edges (occurrences across CRLF and lone CR).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::Path;

use agentd_protocol::fs::EditResult;

use crate::expect::{edit_error, edit_req, edited};
use crate::harness::{Suite, as_edit, set_mode, write_file};

/// Runs one edit on a fresh file `f` holding `initial` (on both sides); returns the native result and
/// the file's bytes afterwards.
async fn edit_once(
    s: &Suite,
    dir: &Path,
    initial: &[u8],
    old: &str,
    new: &str,
    replace_all: bool,
) -> (EditResult, Vec<u8>) {
    let path = format!("{}/f", dir.to_str().unwrap());
    let setup = |d: &Path| write_file(d.join("f"), initial);
    let got = s.mutate(dir, setup, &[edit_req(&path, old, new, replace_all)]).await;
    (as_edit(&got[0]), std::fs::read(dir.join("f")).unwrap())
}

pub async fn golden_24_to_29_edit_matching_forms_and_counts(s: Suite) {
    let (dir, t) = s.fixture("t");
    let f = format!("{t}/f");
    let ok = |n| edited(&f, n);

    // 24.
    let got = edit_once(&s, &dir, b"a\r\nb\r\nc\r\n", "b\nc", "X\nY", false).await;
    s.check("24 LF old on CRLF file", &got, &(ok(1), b"a\r\nX\r\nY\r\n".to_vec()));
    let got = edit_once(&s, &dir, b"a\r\nb\r\nc\r\n", "b\r\nc", "X\nY", false).await;
    s.check("24 exact CRLF old", &got, &(ok(1), b"a\r\nX\nY\r\n".to_vec()));
    // 25.
    let got = edit_once(&s, &dir, b"a\nb\nc\n", "a\r\nb", "P\r\nQ", false).await;
    s.check("25 CRLF old on LF file", &got, &(ok(1), b"P\nQ\nc\n".to_vec()));
    // 26.
    let got = edit_once(&s, &dir, b"x\r\ny\nx\ny\r\nx\r\ny", "x\ny", "Z", true).await;
    s.check("26 replace_all, first matching style only", &got, &(ok(1), b"x\r\ny\nZ\r\nx\r\ny".to_vec()));
    // 27.
    let got = edit_once(&s, &dir, b"a\nb", "b\n", "c\n", false).await;
    s.check(
        "27 not found",
        &got,
        &(edit_error("Error: String not found in file: 'b\n'".to_owned()), b"a\nb".to_vec()),
    );
    // 28.
    let fruit = b"apple\nbanana\napple\n";
    let got = edit_once(&s, &dir, fruit, "apple", "pear", false).await;
    s.check(
        "28 many without replace_all",
        &got,
        &(
            edit_error(
                "Error: String 'apple' appears multiple times. Use replace_all=True to replace all occurrences.".to_owned(),
            ),
            fruit.to_vec(),
        ),
    );
    let got = edit_once(&s, &dir, fruit, "apple", "pear", true).await;
    s.check("28 replace_all", &got, &(ok(2), b"pear\nbanana\npear\n".to_vec()));
    // 29.
    s.check("29 aaa", &edit_once(&s, &dir, b"aaa", "aa", "X", false).await, &(ok(1), b"Xa".to_vec()));
    s.check(
        "29 aaaa replace_all",
        &edit_once(&s, &dir, b"aaaa", "aa", "X", true).await,
        &(ok(2), b"XX".to_vec()),
    );
    s.check(
        "29 old == new",
        &edit_once(&s, &dir, b"hello", "hello", "hello", false).await,
        &(ok(1), b"hello".to_vec()),
    );
    s.finish();
}

pub async fn edge_edit_occurrences_crlf_and_lone_cr(s: Suite) {
    let (dir, t) = s.fixture("t");
    let f = format!("{t}/f");
    let ok = |n| edited(&f, n);
    let not_found = |old: &str| edit_error(format!("Error: String not found in file: '{old}'"));
    let many = |old: &str| {
        edit_error(format!(
            "Error: String '{old}' appears multiple times. Use replace_all=True to replace all occurrences."
        ))
    };

    // 0, 1 and many occurrences, with and without replace_all.
    let text = b"one two two three three three\n";
    s.check(
        "0 occurrences",
        &edit_once(&s, &dir, text, "four", "4", false).await,
        &(not_found("four"), text.to_vec()),
    );
    s.check(
        "0 occurrences, replace_all",
        &edit_once(&s, &dir, text, "four", "4", true).await,
        &(not_found("four"), text.to_vec()),
    );
    s.check(
        "1 occurrence",
        &edit_once(&s, &dir, text, "one", "1", false).await,
        &(ok(1), b"1 two two three three three\n".to_vec()),
    );
    s.check(
        "1 occurrence, replace_all",
        &edit_once(&s, &dir, text, "one", "1", true).await,
        &(ok(1), b"1 two two three three three\n".to_vec()),
    );
    s.check(
        "3 occurrences",
        &edit_once(&s, &dir, text, "three", "3", false).await,
        &(many("three"), text.to_vec()),
    );
    s.check(
        "3 occurrences, replace_all",
        &edit_once(&s, &dir, text, "three", "3", true).await,
        &(ok(3), b"one two two 3 3 3\n".to_vec()),
    );
    // The message quotes `old` verbatim, raw newlines and quotes included.
    let quoted = b"it's\r\nit's\r\n";
    s.check(
        "many, message quotes old verbatim",
        &edit_once(&s, &dir, quoted, "it's\n", "x", false).await,
        &(many("it's\n"), quoted.to_vec()),
    );
    s.check(
        "not found, message quotes old verbatim",
        &edit_once(&s, &dir, quoted, "it's\nnot\n", "x", false).await,
        &(not_found("it's\nnot\n"), quoted.to_vec()),
    );

    // CRLF files: the CRLF form of old and new; replace_all on it.
    let kv = b"k\r\nv\r\nk\r\nv\r\n";
    s.check(
        "CRLF form, replace_all",
        &edit_once(&s, &dir, kv, "k\nv", "K\nV", true).await,
        &(ok(2), b"K\r\nV\r\nK\r\nV\r\n".to_vec()),
    );
    s.check(
        "CRLF form, many",
        &edit_once(&s, &dir, kv, "k\nv", "K\nV", false).await,
        &(many("k\nv"), kv.to_vec()),
    );
    s.check(
        "CRLF form, new with CRLF",
        &edit_once(&s, &dir, b"a\r\nb\r\n", "a\nb", "1\r\n2", false).await,
        &(ok(1), b"1\r\n2\r\n".to_vec()),
    );
    // An exact match inserts new verbatim, even a CRLF into an LF file.
    s.check(
        "exact match, new verbatim",
        &edit_once(&s, &dir, b"a\nb\n", "a", "x\r\ny", false).await,
        &(ok(1), b"x\r\ny\nb\n".to_vec()),
    );
    // Lone CRs are never touched.
    s.check(
        "lone CR, LF old",
        &edit_once(&s, &dir, b"a\rb\r\n", "a\nb", "X", false).await,
        &(not_found("a\nb"), b"a\rb\r\n".to_vec()),
    );
    s.check(
        "lone CR, exact old",
        &edit_once(&s, &dir, b"p\rq", "p\rq", "Z", false).await,
        &(ok(1), b"Z".to_vec()),
    );
    // Multibyte text and deletion (empty new).
    s.check(
        "multibyte",
        &edit_once(&s, &dir, "é😀é".as_bytes(), "😀", "", false).await,
        &(ok(1), "éé".as_bytes().to_vec()),
    );

    // Mode is kept (rewritten in place).
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                write_file(d.join("f"), b"abc");
                set_mode(d.join("f"), 0o640);
            },
            &[edit_req(&f, "b", "B", false)],
        )
        .await;
    s.check("mode kept: result", &as_edit(&got[0]), &ok(1));
    s.check(
        "mode kept: mode",
        &(std::fs::metadata(dir.join("f")).unwrap().permissions().mode() & 0o7777),
        &0o640,
    );

    // Relative path.
    let got =
        s.mutate(&dir, |d: &Path| write_file(d.join("f"), b"abc"), &[edit_req("t/f", "a", "Z", false)]).await;
    s.check("relative edit", &as_edit(&got[0]), &edited("t/f", 1));
    s.check("relative edit: content", &std::fs::read(dir.join("f")).unwrap(), &b"Zbc".to_vec());
    s.finish();
}

pub async fn golden_30_to_32_edit_errors_links_and_large_payloads(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 30.
    let missing = format!("{t}/missing");
    let got = s
        .mutate(
            &dir,
            |_: &Path| {},
            &[edit_req(&missing, "", "y", false), edit_req(&missing, "a", "b", false)],
        )
        .await;
    s.check(
        "30 empty old on a missing file",
        &as_edit(&got[0]),
        &edit_error("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned()),
    );
    s.check("30 missing", &as_edit(&got[1]), &edit_error(format!("Error: File '{missing}' not found")));
    let got = edit_once(&s, &dir, b"ab\xffcd", "ab", "y", false).await;
    s.check(
        "30 not UTF-8",
        &got,
        &(edit_error(format!("Error: File '{t}/f' is not a text file")), b"ab\xffcd".to_vec()),
    );
    // The extension is irrelevant.
    let got = s
        .mutate(
            &dir,
            |d: &Path| write_file(d.join("x.png"), b"abc"),
            &[edit_req(&format!("{t}/x.png"), "b", "B", false)],
        )
        .await;
    s.check("edit a .png holding text", &as_edit(&got[0]), &edited(&format!("{t}/x.png"), 1));
    let got = s
        .mutate(
            &dir,
            |d: &Path| std::fs::create_dir(d.join("d")).unwrap(),
            &[edit_req(&format!("{t}/d"), "ab", "y", false)],
        )
        .await;
    s.check("30 directory", &as_edit(&got[0]), &edit_error(format!("Error: '{t}/d' is not a regular file")));
    // Empty old wins even on a directory.
    let got = s
        .mutate(
            &dir,
            |d: &Path| std::fs::create_dir(d.join("d")).unwrap(),
            &[edit_req(&format!("{t}/d"), "", "y", false)],
        )
        .await;
    s.check(
        "30 empty old on a directory",
        &as_edit(&got[0]),
        &edit_error("Error: old_string cannot be empty. Provide the exact text to replace.".to_owned()),
    );
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                nix::unistd::mkfifo(&d.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap()
            },
            &[edit_req(&format!("{t}/fifo"), "ab", "y", false)],
        )
        .await;
    s.check("FIFO", &as_edit(&got[0]), &edit_error(format!("Error: '{t}/fifo' is not a regular file")));
    let got = s
        .mutate(
            &dir,
            |d: &Path| symlink("nowhere", d.join("dangling")).unwrap(),
            &[edit_req(&format!("{t}/dangling"), "a", "b", false)],
        )
        .await;
    s.check("dangling link", &as_edit(&got[0]), &edit_error(format!("Error: File '{t}/dangling' not found")));

    // 31: the edit writes through the link.
    let got = s
        .mutate(
            &dir,
            |d: &Path| {
                write_file(d.join("f"), b"abc");
                symlink("f", d.join("ln")).unwrap();
            },
            &[edit_req(&format!("{t}/ln"), "a", "Z", false)],
        )
        .await;
    s.check("31 through a link", &as_edit(&got[0]), &edited(&format!("{t}/ln"), 1));
    s.check("31 target edited", &std::fs::read(dir.join("f")).unwrap(), &b"Zbc".to_vec());
    s.ensure(
        "31 link still a link",
        std::fs::symlink_metadata(dir.join("ln")).map(|m| m.file_type().is_symlink()).unwrap_or(false),
        "ln is not a symlink",
    );

    // 32: payload over 50000 bytes; nothing left in /tmp.
    let tmp_leftovers = || -> Vec<String> {
        std::fs::read_dir("/tmp")
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".deepagents_edit_"))
            .collect()
    };
    let before = tmp_leftovers();
    let mut initial = b"HEAD\n".to_vec();
    initial.extend_from_slice("m".repeat(30_000).as_bytes());
    initial.extend_from_slice(b"\nTAIL\n");
    let got = edit_once(&s, &dir, &initial, &"m".repeat(30_000), &"n".repeat(30_000), false).await;
    let want = format!("HEAD\n{}\nTAIL\n", "n".repeat(30_000)).into_bytes();
    s.check("32 large payload", &got, &(edited(&format!("{t}/f"), 1), want));
    s.check("32 no temp files left", &tmp_leftovers(), &before);
    s.finish();
}
