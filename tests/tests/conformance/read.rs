//! `read`: golden cases 7–22 (line endings, windows, paging, the UTF-8 sniff, binary files, the
//! byte cap) and the edges (long lines, CRLF offsets, relative paths, the empty path).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed setup step aborts the test with its message"
)]

use std::os::unix::fs::symlink;
use std::path::Path;

use agentd_protocol::fs::{Encoding, ReadResult};

use crate::expect::{
    b64, delete_error, delete_req, edit_error, edit_req, ls_error, no_lines, page, read_error, whole,
    write_error, write_req,
};
use crate::harness::{Suite, as_delete, as_edit, as_write, write_file};

/// `TRUNCATION_MSG` of the contract (§3.2 step 7), 194 bytes.
const M: &str = "\n\n[Output was truncated due to size limits. This paginated read result exceeded the sandbox stdout limit. Continue reading with a larger offset or smaller limit to inspect the rest of the file.]";
const EMPTY_REMINDER: &str = "System reminder: File exists but has empty contents";

pub async fn golden_07_to_10_read_line_endings_and_windows(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 7: CRLF.
    write_file(dir.join("crlf.txt"), b"a\r\nb\r\nc\r\n");
    let p = format!("{t}/crlf.txt");
    s.check("7 read()", &s.read(&p, 0, 2000).await, &page("a\nb\nc", Some(3), 1, 3, None));
    s.check("7 read(1,1)", &s.read(&p, 1, 1).await, &page("b", Some(3), 2, 2, Some(2)));

    // 8: lone CR, and files of bare terminators.
    write_file(dir.join("cr.txt"), b"a\r\rb");
    write_file(dir.join("lf1.txt"), b"\n");
    write_file(dir.join("lf3.txt"), b"\n\n\n");
    s.check(
        "8 a\\r\\rb",
        &s.read(&format!("{t}/cr.txt"), 0, 2000).await,
        &page("a\n\nb", Some(3), 1, 3, None),
    );
    s.check("8 \\n", &s.read(&format!("{t}/lf1.txt"), 0, 2000).await, &page("", Some(1), 1, 1, None));
    s.check(
        "8 \\n\\n\\n",
        &s.read(&format!("{t}/lf3.txt"), 0, 2000).await,
        &page("\n\n", Some(3), 1, 3, None),
    );

    // 9 and 10, with and without the final LF.
    for (name, bytes) in [("l3.txt", &b"L1\nL2\nL3"[..]), ("l3lf.txt", &b"L1\nL2\nL3\n"[..])] {
        write_file(dir.join(name), bytes);
        let p = format!("{t}/{name}");
        s.check(
            format!("9 {name} read(3,2000)"),
            &s.read(&p, 3, 2000).await,
            &read_error(format!("File '{p}': Line offset 3 exceeds file length (3 lines)")),
        );
        s.check(
            format!("9 {name} read(100,10)"),
            &s.read(&p, 100, 10).await,
            &read_error(format!("File '{p}': Line offset 100 exceeds file length (3 lines)")),
        );
        s.check(
            format!("9 {name} read(2,2000)"),
            &s.read(&p, 2, 2000).await,
            &page("L3", Some(3), 3, 3, None),
        );
        s.check(format!("10 {name} read(0,0)"), &s.read(&p, 0, 0).await, &no_lines());
        s.check(format!("10 {name} read(0,-1)"), &s.read(&p, 0, -1).await, &no_lines());
        s.check(
            format!("10 {name} read(-5,1)"),
            &s.read(&p, -5, 1).await,
            &page("L1", Some(3), 1, 1, Some(1)),
        );
        // limit 0 wins over an offset past the end (step 5 precedes step 8).
        s.check(format!("10 {name} read(100,0)"), &s.read(&p, 100, 0).await, &no_lines());
        s.check(format!("{name} read(-1,-1)"), &s.read(&p, -1, -1).await, &no_lines());
    }
    s.finish();
}

pub async fn golden_11_to_13_read_empty_paging_and_the_utf8_sniff(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 11: empty files, any offset, limit or extension.
    for name in ["x.txt", "x.png"] {
        write_file(dir.join(name), b"");
        let p = format!("{t}/{name}");
        for (offset, limit) in [(0, 2000), (0, 0), (7, 3), (-1, -1), (1_000_000, 1)] {
            s.check(
                format!("11 {name} read({offset},{limit})"),
                &s.read(&p, offset, limit).await,
                &whole(EMPTY_REMINDER, Encoding::Utf8),
            );
        }
    }

    // 12: 2500 lines, two pages.
    let lines: Vec<String> = (0..2500).map(|i| i.to_string()).collect();
    write_file(dir.join("n.txt"), lines.iter().map(|l| format!("{l}\n")).collect::<String>());
    let p = format!("{t}/n.txt");
    s.check(
        "12 read()",
        &s.read(&p, 0, 2000).await,
        &page(&lines[..2000].join("\n"), Some(2500), 1, 2000, Some(2000)),
    );
    s.check(
        "12 read(2000,2000)",
        &s.read(&p, 2000, 2000).await,
        &page(&lines[2000..].join("\n"), Some(2500), 2001, 2500, None),
    );
    s.check(
        "12 read(2499,5) (last line)",
        &s.read(&p, 2499, 5).await,
        &page("2499", Some(2500), 2500, 2500, None),
    );
    s.check(
        "12 read(2500,5) (offset == line count)",
        &s.read(&p, 2500, 5).await,
        &read_error(format!("File '{p}': Line offset 2500 exceeds file length (2500 lines)")),
    );

    // 13: a character straddling byte 8192 is fine; an invalid byte inside the window is binary.
    let mut straddle = vec![b'a'; 8191];
    straddle.extend_from_slice("é\nrest".as_bytes());
    write_file(dir.join("straddle.txt"), &straddle);
    s.check(
        "13 é straddles 8192",
        &s.read(&format!("{t}/straddle.txt"), 0, 2000).await,
        &page(&format!("{}é\nrest", "a".repeat(8191)), Some(2), 1, 2, None),
    );
    // A 4-byte character starting at byte 8190 (two of its bytes inside the window).
    let mut straddle4 = vec![b'a'; 8190];
    straddle4.extend_from_slice("😀\n".as_bytes());
    write_file(dir.join("straddle4.txt"), &straddle4);
    s.check(
        "13 😀 straddles 8192",
        &s.read(&format!("{t}/straddle4.txt"), 0, 2000).await,
        &page(&format!("{}😀", "a".repeat(8190)), Some(1), 1, 1, None),
    );
    // A sequence cut at the window's end passes the sniff, but decoding the page then fails (step 10).
    let mut cut = vec![b'a'; 8191];
    cut.extend_from_slice(b"\xf0\x9fx\n");
    write_file(dir.join("cut.txt"), &cut);
    let p = format!("{t}/cut.txt");
    let got = s.read(&p, 0, 2000).await;
    let prefix = format!("File '{p}': unexpected server response: ");
    s.ensure(
        format!("13 a broken sequence across 8192: an error starting {prefix:?}"),
        got.error.as_deref().is_some_and(|e| e.starts_with(&prefix))
            && got == ReadResult::error(got.error.clone().unwrap_or_default()),
        &got,
    );
    let mut bad = vec![b'a'; 8191];
    bad.extend_from_slice(b"\xffabc");
    write_file(dir.join("bad8191.txt"), &bad);
    s.check("13 \\xff at byte 8191", &s.read(&format!("{t}/bad8191.txt"), 0, 2000).await, &b64(&bad));
    // The sniff decides before `limit == 0` (step 4 precedes step 5).
    s.check("13 \\xff at byte 8191, limit 0", &s.read(&format!("{t}/bad8191.txt"), 0, 0).await, &b64(&bad));
    s.finish();
}

pub async fn golden_14_15_read_invalid_utf8_after_the_sniff(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 14: an incomplete tail, and a bad byte just past the sniff window, inside the page.
    write_file(dir.join("tail.txt"), b"abc\xe4");
    let mut past = vec![b'a'; 8192];
    past.extend_from_slice(b"\xffabc");
    write_file(dir.join("past.txt"), &past);
    for name in ["tail.txt", "past.txt"] {
        let p = format!("{t}/{name}");
        let got = s.read(&p, 0, 2000).await;
        let prefix = format!("File '{p}': unexpected server response: ");
        s.ensure(
            format!("14 {name}: an error starting {prefix:?} and nothing else"),
            got.error.as_deref().is_some_and(|e| e.starts_with(&prefix))
                && got == ReadResult::error(got.error.clone().unwrap_or_default()),
            &got,
        );
    }

    // 15: a bad byte well past the page does no harm; the recount is lenient.
    let mut ok = b"ok\n".repeat(10_000);
    ok.extend_from_slice(b"\xff\n");
    write_file(dir.join("ok.txt"), &ok);
    s.check(
        "15 read(0,1)",
        &s.read(&format!("{t}/ok.txt"), 0, 1).await,
        &page("ok", Some(10_001), 1, 1, Some(1)),
    );
    s.finish();
}

pub async fn golden_16_17_read_binary_extensions_and_content(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 16.
    write_file(dir.join("x.PNG"), b"\x89PNG\r\n");
    write_file(dir.join(".png"), b"hi");
    write_file(dir.join("a.tar.PDF"), b"hi");
    write_file(dir.join("a.mkv"), b"x");
    write_file(dir.join("a.svg"), b"<svg/>\n");
    let want_png = whole("iVBORw0K", Encoding::Base64);
    s.check("16 x.PNG", &s.read(&format!("{t}/x.PNG"), 0, 2000).await, &want_png);
    s.check("16 x.PNG limit 0", &s.read(&format!("{t}/x.PNG"), 0, 0).await, &want_png);
    s.check("16 x.PNG offset past the end", &s.read(&format!("{t}/x.PNG"), 50, 1).await, &want_png);
    s.check(
        "16 .png is text",
        &s.read(&format!("{t}/.png"), 0, 2000).await,
        &page("hi", Some(1), 1, 1, None),
    );
    s.check(
        "16 a.tar.PDF",
        &s.read(&format!("{t}/a.tar.PDF"), 0, 2000).await,
        &whole("aGk=", Encoding::Base64),
    );
    s.check("16 a.mkv", &s.read(&format!("{t}/a.mkv"), 0, 2000).await, &whole("eA==", Encoding::Base64));
    s.check(
        "16 a.svg is text",
        &s.read(&format!("{t}/a.svg"), 0, 2000).await,
        &page("<svg/>", Some(1), 1, 1, None),
    );

    // Binary by extension with text content, and by content with a text extension.
    write_file(dir.join("notes.pdf"), b"hello\n");
    s.check(
        "notes.pdf",
        &s.read(&format!("{t}/notes.pdf"), 0, 2000).await,
        &whole("aGVsbG8K", Encoding::Base64),
    );
    let png_bytes = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    write_file(dir.join("image.txt"), &png_bytes);
    s.check("PNG bytes in image.txt", &s.read(&format!("{t}/image.txt"), 0, 2000).await, &b64(&png_bytes));
    s.check(
        "PNG bytes in image.txt, limit 0",
        &s.read(&format!("{t}/image.txt"), 3, 0).await,
        &b64(&png_bytes),
    );
    // NUL and control bytes are valid UTF-8: text.
    write_file(dir.join("ctl.bin"), b"\x00\x01\x02\n");
    s.check(
        "ctl.bin",
        &s.read(&format!("{t}/ctl.bin"), 0, 2000).await,
        &page("\0\u{1}\u{2}", Some(1), 1, 1, None),
    );
    // Binary by content has no size cap (quirk of step 4).
    let big: Vec<u8> = (0..600_000u32).map(|i| if i % 7 == 0 { 0xff } else { b'b' }).collect();
    write_file(dir.join("big.dat"), &big);
    s.check("600000 B of invalid UTF-8, no cap", &s.read(&format!("{t}/big.dat"), 0, 2000).await, &b64(&big));

    // 17: the preview cap of binary extensions.
    let bytes: Vec<u8> = (0..512_001u32).map(|i| (i % 251) as u8).collect();
    write_file(dir.join("t.png"), &bytes[..512_000]);
    write_file(dir.join("big.png"), &bytes);
    s.check("17 512000 B .png", &s.read(&format!("{t}/t.png"), 0, 2000).await, &b64(&bytes[..512_000]));
    s.check(
        "17 512001 B .png",
        &s.read(&format!("{t}/big.png"), 0, 2000).await,
        &read_error(format!("File '{t}/big.png': Binary file exceeds maximum preview size of 512000 bytes")),
    );
    s.finish();
}

pub async fn golden_18_to_20_read_byte_cap_and_total_lines(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 18: one huge line, ASCII and 4-byte characters.
    write_file(dir.join("x.txt"), "x".repeat(600_000));
    let want = format!("{}{M}", "x".repeat(511_806));
    assert_eq!(want.len(), 512_000);
    s.check("18 x×600000", &s.read(&format!("{t}/x.txt"), 0, 2000).await, &page(&want, Some(1), 1, 1, None));
    write_file(dir.join("emoji.txt"), "😀".repeat(200_000));
    let want = format!("{}{M}", "😀".repeat(127_951));
    assert_eq!(want.len(), 511_998);
    s.check(
        "18 😀×200000",
        &s.read(&format!("{t}/emoji.txt"), 0, 2000).await,
        &page(&want, Some(1), 1, 1, None),
    );

    // 19: many long lines; the cut line does not count.
    let line = "y".repeat(999);
    write_file(dir.join("y.txt"), format!("{line}\n").repeat(600));
    let want = format!("{}\n{}{M}", [line.as_str(); 511].join("\n"), "y".repeat(806));
    assert_eq!(want.len(), 512_000);
    s.check(
        "19 600 lines of 999",
        &s.read(&format!("{t}/y.txt"), 0, 2000).await,
        &page(&want, Some(600), 1, 511, Some(511)),
    );

    // 20: total_lines only up to 1048576 bytes unless the page reached the end.
    let z = "z".repeat(99);
    write_file(dir.join("z.txt"), format!("{z}\n").repeat(20_000));
    let ten_z = [z.as_str(); 10].join("\n");
    let p = format!("{t}/z.txt");
    s.check("20 2000000 B read(0,10)", &s.read(&p, 0, 10).await, &page(&ten_z, None, 1, 10, Some(10)));
    s.check(
        "20 2000000 B read(19990,10)",
        &s.read(&p, 19_990, 10).await,
        &page(&ten_z, Some(20_000), 19_991, 20_000, None),
    );
    let q = "q".repeat(1023);
    let exact = format!("{q}\n").repeat(1024);
    assert_eq!(exact.len(), 1_048_576);
    let ten_q = [q.as_str(); 10].join("\n");
    write_file(dir.join("q.txt"), &exact);
    write_file(dir.join("q-1.txt"), &exact[..exact.len() - 1]);
    write_file(dir.join("q+1.txt"), format!("{exact}q"));
    s.check(
        "20 1048576 B read(0,10)",
        &s.read(&format!("{t}/q.txt"), 0, 10).await,
        &page(&ten_q, Some(1024), 1, 10, Some(10)),
    );
    s.check(
        "20 1048575 B read(0,10)",
        &s.read(&format!("{t}/q-1.txt"), 0, 10).await,
        &page(&ten_q, Some(1024), 1, 10, Some(10)),
    );
    s.check(
        "20 1048577 B read(0,10)",
        &s.read(&format!("{t}/q+1.txt"), 0, 10).await,
        &page(&ten_q, None, 1, 10, Some(10)),
    );
    s.finish();
}

pub async fn golden_21_22_read_odd_bytes_and_non_files(s: Suite) {
    let (dir, t) = s.fixture("t");

    // 21: NUL kept, BOM kept, FF / VT / U+2028 do not end lines.
    write_file(dir.join("nul.txt"), b"a\0b\nc");
    write_file(dir.join("bom.txt"), b"\xef\xbb\xbfhi\n");
    write_file(dir.join("ff.txt"), b"a\x0cb\x0bc\xe2\x80\xa8d");
    s.check(
        "21 NUL",
        &s.read(&format!("{t}/nul.txt"), 0, 2000).await,
        &page("a\u{0}b\nc", Some(2), 1, 2, None),
    );
    s.check(
        "21 BOM",
        &s.read(&format!("{t}/bom.txt"), 0, 2000).await,
        &page("\u{feff}hi", Some(1), 1, 1, None),
    );
    s.check(
        "21 FF VT U+2028",
        &s.read(&format!("{t}/ff.txt"), 0, 2000).await,
        &page("a\u{c}b\u{b}c\u{2028}d", Some(1), 1, 1, None),
    );

    // 22: directory, FIFO, dangling link; and a missing file.
    std::fs::create_dir(dir.join("d")).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    symlink("nowhere", dir.join("dangling")).unwrap();
    for (name, what) in [
        ("d", "not_a_file"),
        ("fifo", "not_a_file"),
        ("dangling", "file_not_found"),
        ("missing", "file_not_found"),
    ] {
        let p = format!("{t}/{name}");
        s.check(format!("22 {name}"), &s.read(&p, 0, 2000).await, &read_error(format!("File '{p}': {what}")));
    }
    // A link to a file is followed.
    symlink("nul.txt", dir.join("ln")).unwrap();
    s.check(
        "read through a link",
        &s.read(&format!("{t}/ln"), 0, 2000).await,
        &page("a\u{0}b\nc", Some(2), 1, 2, None),
    );
    s.finish();
}

pub async fn edge_read_long_lines_crlf_offsets_and_relative_paths(s: Suite) {
    let (dir, t) = s.fixture("t");

    // Lines far longer than 5000 characters come back whole.
    let long = format!("{}\n{}", "a".repeat(6000), "b".repeat(7000));
    write_file(dir.join("long.txt"), &long);
    s.check(
        "long lines",
        &s.read(&format!("{t}/long.txt"), 0, 2000).await,
        &page(&long, Some(2), 1, 2, None),
    );
    s.check(
        "long lines read(1,1)",
        &s.read(&format!("{t}/long.txt"), 1, 1).await,
        &page(&"b".repeat(7000), Some(2), 2, 2, None),
    );

    // Mixed terminators, each counted once.
    for (name, bytes, content, total) in [
        ("mix.txt", &b"a\r\n\r\nb\rc\nd"[..], "a\n\nb\nc\nd", 5),
        ("cr_end.txt", b"a\r", "a", 1),
        ("crlf_only.txt", b"\r\n", "", 1),
        ("cr_cr.txt", b"\r\r", "\n", 2),
        ("lf_cr.txt", b"\n\r", "\n", 2),
    ] {
        write_file(dir.join(name), bytes);
        s.check(
            name,
            &s.read(&format!("{t}/{name}"), 0, 2000).await,
            &page(content, Some(total), 1, total, None),
        );
    }

    // Offsets at and past the end of a CRLF file.
    write_file(dir.join("two.txt"), b"a\r\nb\r\n");
    let p = format!("{t}/two.txt");
    s.check("two read(0,1)", &s.read(&p, 0, 1).await, &page("a", Some(2), 1, 1, Some(1)));
    s.check("two read(1,5)", &s.read(&p, 1, 5).await, &page("b", Some(2), 2, 2, None));
    s.check(
        "two read(2,1)",
        &s.read(&p, 2, 1).await,
        &read_error(format!("File '{p}': Line offset 2 exceeds file length (2 lines)")),
    );
    s.check(
        "two read(i64::MAX,1)",
        &s.read(&p, i64::MAX, 1).await,
        &read_error(format!("File '{p}': Line offset {} exceeds file length (2 lines)", i64::MAX)),
    );
    s.check(
        "two read(i64::MIN,i64::MAX)",
        &s.read(&p, i64::MIN, i64::MAX).await,
        &page("a\nb", Some(2), 1, 2, None),
    );

    // Relative paths resolve against the working directory; messages echo them verbatim.
    s.check("relative read", &s.read("t/two.txt", 0, 1).await, &page("a", Some(2), 1, 1, Some(1)));
    s.check("relative read ./", &s.read("./t//two.txt", 1, 1).await, &page("b", Some(2), 2, 2, None));
    s.check(
        "relative missing",
        &s.read("nope.txt", 0, 1).await,
        &read_error("File 'nope.txt': file_not_found".to_owned()),
    );
    s.finish();
}

/// `""` names nothing: `stat("")` is ENOENT, which is what the reference's helpers see (its `ls("")`
/// is golden case 6). It must not resolve to the working directory.
pub async fn edge_empty_path_names_nothing(s: Suite) {
    let (dir, _) = s.fixture("t");
    write_file(dir.join("keep"), b"k");
    s.check("ls(\"\")", &s.ls("").await, &ls_error("Path '': path_not_found".to_owned()));
    s.check("read(\"\")", &s.read("", 0, 1).await, &read_error("File '': file_not_found".to_owned()));
    let got =
        s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[edit_req("", "a", "b", false)]).await;
    s.check("edit(\"\")", &as_edit(&got[0]), &edit_error("Error: File '' not found".to_owned()));
    // `write` uploads to "", which does not start with `/`.
    let got = s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[write_req("", "x")]).await;
    s.check(
        "write(\"\")",
        &as_write(&got[0]),
        &write_error("Failed to write file '': invalid_path".to_owned()),
    );
    let got = s.mutate(&dir, |d: &Path| write_file(d.join("keep"), b"k"), &[delete_req("")]).await;
    s.check("delete(\"\")", &as_delete(&got[0]), &delete_error("Error: '' not found".to_owned()));
    s.ensure("workspace intact", dir.join("keep").exists(), "T/keep gone");
    s.finish();
}
