//! `write`: golden case 23 (creates, refuses to overwrite, fails as values).

use std::path::Path;

use crate::expect::{write_error, write_req, written};
use crate::harness::{Suite, as_write, write_file};

pub async fn golden_23_write_creates_overwrites_and_fails_as_values(s: Suite) {
    let (dir, t) = s.fixture("t");
    let setup = |d: &Path| write_file(d.join("afile"), b"");

    let target = format!("{t}/w/x/y.txt");
    let got = s.mutate(&dir, setup, &[write_req(&target, "hi"), write_req(&target, "second")]).await;
    s.check("23 write new", &as_write(&got[0]), &written(&target));
    s.check("23 write again", &as_write(&got[1]), &written(&target));
    s.check("23 file holds `second`", &std::fs::read(dir.join("w/x/y.txt")).ok(), &Some(b"second".to_vec()));

    let got = s.mutate(&dir, setup, &[write_req("rel.txt", "x")]).await;
    s.check(
        "23 relative",
        &as_write(&got[0]),
        &write_error("Failed to write file 'rel.txt': invalid_path".to_owned()),
    );
    s.ensure("23 relative write created nothing", !s.ws().join("rel.txt").exists(), "rel.txt exists");

    let got = s.mutate(&dir, setup, &[write_req(&t, "x")]).await;
    s.check(
        "23 onto a directory",
        &as_write(&got[0]),
        &write_error(format!("Failed to write file '{t}': is_directory")),
    );

    let got = as_write(&s.mutate(&dir, setup, &[write_req(&format!("{t}/afile/c"), "x")]).await[0]);
    s.ensure("23 parent is a file: an error and no path", got.error.is_some() && got.path.is_none(), &got);

    // Exact bytes: no newline translation, multibyte, NUL, empty content, overwrite with shorter text.
    let body = "l1\r\nl2\rl3\n\0é😀";
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}/bytes.txt"), body)]).await;
    s.check("write exact bytes", &as_write(&got[0]), &written(&format!("{t}/bytes.txt")));
    s.check(
        "write exact bytes: content",
        &std::fs::read(dir.join("bytes.txt")).ok(),
        &Some(body.as_bytes().to_vec()),
    );
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}/afile"), "")]).await;
    s.check("write empty", &as_write(&got[0]), &written(&format!("{t}/afile")));
    let got = s
        .mutate(
            &dir,
            |d: &Path| write_file(d.join("long.txt"), "0123456789"),
            &[write_req(&format!("{t}/long.txt"), "ab")],
        )
        .await;
    s.check("overwrite shorter", &as_write(&got[0]), &written(&format!("{t}/long.txt")));
    s.check("overwrite shorter: content", &std::fs::read(dir.join("long.txt")).ok(), &Some(b"ab".to_vec()));
    // Relative and doubled slashes are echoed verbatim.
    let got = s.mutate(&dir, setup, &[write_req(&format!("{t}//deep//z.txt"), "z")]).await;
    s.check("write with //", &as_write(&got[0]), &written(&format!("{t}//deep//z.txt")));
    s.check("write with //: content", &std::fs::read(dir.join("deep/z.txt")).ok(), &Some(b"z".to_vec()));
    s.finish();
}
