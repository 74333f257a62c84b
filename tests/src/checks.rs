//! Checks any sandbox must pass, whichever channel carries its calls (the provider tests share
//! them): commands and verbs, large transfers, the per-file transfer codes.

/// `execute`, the verbs and the offload on any sandbox, whichever channel carries them: exact
/// output and exit codes, shell text untouched, a write larger than one `sh -c` argument, an
/// offloaded capture. Leaves `/tmp/verbs/{a,big,cap}.txt`.
pub async fn check_commands_and_verbs(sb: &dyn agentd_host::BaseSandbox) {
    let r = sb.execute("printf a; printf b >&2; exit 3", None).await.expect("transport");
    assert_eq!((r.output.as_str(), r.exit_code), ("ab", Some(3)));
    // Quotes, `$` and newlines reach the shell untouched.
    let r = sb.execute("x='it''s'; echo \"$x\" \"$((6*7))\"\necho two", None).await.expect("transport");
    assert_eq!(r.output, "its 42\ntwo\n");
    let w = sb.write("/tmp/verbs/a.txt", "one\ntwo\nthree\n").await.expect("transport");
    assert_eq!((w.error, w.path.as_deref()), (None, Some("/tmp/verbs/a.txt")));
    let read = sb.read("/tmp/verbs/a.txt", 1, 1).await.expect("transport");
    assert_eq!(read.file_data.expect("read: content").content, "two");
    let e = sb.edit("/tmp/verbs/a.txt", "three", "3", false).await.expect("transport");
    assert_eq!((e.error, e.occurrences), (None, Some(1)));
    let g = sb.grep("3", Some("/tmp/verbs"), None, None).await.expect("transport");
    assert_eq!(
        g.matches.expect("grep: matches").iter().map(|m| (m.path.as_str(), m.line)).collect::<Vec<_>>(),
        [("/tmp/verbs/a.txt", 3)]
    );
    // A write larger than one `sh -c` argument may hold (the fallback uploads it as a script).
    let big = "x".repeat(300 << 10);
    assert_eq!(sb.write("/tmp/verbs/big.txt", &big).await.expect("transport").error, None);
    let back = sb.download_files(&["/tmp/verbs/big.txt".into()]).await.expect("transport");
    assert_eq!(back[0].content.as_deref(), Some(big.as_bytes()));
    let off = sb
        .execute_with_offload(&agentd_host::OffloadRequest::new("seq 1 20000", "/tmp/verbs/cap.txt", 1000))
        .await
        .expect("transport");
    assert!(off.offloaded, "{off:?}");
    let ls = sb.ls("/tmp/verbs").await.expect("transport");
    let mut names: Vec<_> = ls.entries.expect("ls: entries").into_iter().map(|e| e.path).collect();
    names.sort();
    assert_eq!(names, ["/tmp/verbs/a.txt", "/tmp/verbs/big.txt", "/tmp/verbs/cap.txt"]);
}

/// 100 MiB of random bytes up to `/tmp/big/file.bin` and back with matching sha256, through the
/// sandbox's own transfer channel (`how` names it in the printed timing), then the per-file codes.
pub async fn check_transfers(sb: &dyn agentd_host::BaseSandbox, how: &str) {
    use sha2::{Digest as _, Sha256};
    let mut data = vec![0u8; 100 << 20];
    rand::Fill::fill(&mut data[..], &mut rand::rng());
    let digest = format!("{:x}", Sha256::digest(&data));
    let started = std::time::Instant::now();
    let up = sb.upload_files(&[("/tmp/big/file.bin".into(), data)]).await.unwrap();
    assert_eq!(up[0].error, None);
    let down = sb.download_files(&["/tmp/big/file.bin".into()]).await.unwrap();
    assert_eq!(down[0].error, None);
    assert_eq!(format!("{:x}", Sha256::digest(down[0].content.as_ref().unwrap())), digest);
    eprintln!("100 MiB up and down through {how}: {:?}", started.elapsed());
    check_per_file_codes(sb).await;
}

/// The contract's per-file transfer codes, in order, with exact bytes next to failures, on any
/// sandbox: `/tmp/big` must be a directory there.
pub async fn check_per_file_codes(sb: &dyn agentd_host::BaseSandbox) {
    let up = sb
        .upload_files(&[
            ("/tmp/big".into(), b"x".to_vec()),
            ("rel".into(), vec![]),
            ("/tmp/n/deep/f".into(), b"\0\r\n\xff".to_vec()),
        ])
        .await
        .expect("upload");
    let errors: Vec<_> = up.iter().map(|u| u.error.as_deref()).collect();
    assert_eq!(errors, [Some("is_directory"), Some("invalid_path"), None]);
    let paths = ["/tmp/missing", "/tmp/big", "relative", "/tmp/n/deep/f"].map(String::from);
    let down = sb.download_files(&paths).await.expect("download");
    let errors: Vec<_> = down.iter().map(|d| d.error.as_deref()).collect();
    assert_eq!(errors, [Some("file_not_found"), Some("is_directory"), Some("invalid_path"), None]);
    assert_eq!(down[3].content.as_deref(), Some(&b"\0\r\n\xff"[..]));
}
