//! upload_files / download_files through a real agentd: per-file codes, order, exact bytes, 100 MiB.

use agentd_host::{BaseSandbox, LocalSandbox};
use sha2::{Digest as _, Sha256};

#[tokio::test]
async fn relative_paths_are_invalid_and_results_keep_input_order() {
    let sb = LocalSandbox::start().await.unwrap();
    let t = sb.workspace().to_str().unwrap().to_owned();
    // Golden case 1.
    let up = sb.upload_files(&[("rel.txt".into(), b"x".to_vec())]).await.unwrap();
    assert_eq!(up[0].error.as_deref(), Some("invalid_path"));
    let down = sb.download_files(&["relative/path.txt".into()]).await.unwrap();
    assert_eq!((down[0].content.as_ref(), down[0].error.as_deref()), (None, Some("invalid_path")));
    // Golden case 2.
    std::fs::create_dir(sb.workspace().join("d")).unwrap();
    let down = sb.download_files(&[format!("{t}/missing"), format!("{t}/d")]).await.unwrap();
    let errors: Vec<_> = down.iter().map(|d| (d.path.clone(), d.error.clone())).collect();
    assert_eq!(
        errors,
        [
            (format!("{t}/missing"), Some("file_not_found".into())),
            (format!("{t}/d"), Some("is_directory".into()))
        ]
    );
    // Golden case 3: parents created, byte exact, partial success.
    let files = vec![
        (format!("{t}/n/deep/f"), b"\0\r\n\xff".to_vec()),
        ("x".into(), vec![]),
        (format!("{t}/z"), b"1".to_vec()),
    ];
    let up = sb.upload_files(&files).await.unwrap();
    let errors: Vec<_> = up.iter().map(|u| u.error.as_deref()).collect();
    assert_eq!(errors, [None, Some("invalid_path"), None]);
    let down = sb.download_files(&[format!("{t}/n/deep/f")]).await.unwrap();
    assert_eq!(down[0].content.as_deref(), Some(&b"\0\r\n\xff"[..]));
    // Uploading onto a directory, through a regular file, with a NUL.
    let up = sb
        .upload_files(&[
            (format!("{t}/d"), b"x".to_vec()),
            (format!("{t}/z/child"), b"x".to_vec()),
            (format!("{t}/a\0b"), vec![]),
        ])
        .await
        .unwrap();
    let errors: Vec<_> = up.iter().map(|u| u.error.as_deref()).collect();
    assert_eq!(errors, [Some("is_directory"), Some("invalid_path"), Some("invalid_path")]);
}

#[tokio::test]
async fn every_byte_value_round_trips_and_overwrites_truncate() {
    let sb = LocalSandbox::start().await.unwrap();
    let path = format!("{}/all-bytes", sb.workspace().display());
    let data: Vec<u8> = (0..=255u8).cycle().take(10 << 20).collect();
    assert_eq!(sb.upload_files(&[(path.clone(), data.clone())]).await.unwrap()[0].error, None);
    assert_eq!(
        sb.download_files(std::slice::from_ref(&path)).await.unwrap()[0].content.as_deref(),
        Some(&data[..])
    );
    assert_eq!(sb.upload_files(&[(path.clone(), b"short".to_vec())]).await.unwrap()[0].error, None);
    assert_eq!(std::fs::read(&path).unwrap(), b"short");
}

#[tokio::test]
async fn hundred_mib_round_trip_with_matching_sha256() {
    let sb = LocalSandbox::start().await.unwrap();
    let local = tempfile::tempdir().unwrap();
    let source = local.path().join("source.bin");
    let mut data = vec![0u8; 100 << 20];
    rand::Fill::fill(&mut data[..], &mut rand::rng());
    std::fs::write(&source, &data).unwrap();
    let expected = format!("{:x}", Sha256::digest(&data));
    drop(data);

    let link = sb.agentd().link().await.unwrap();
    let remote = format!("{}/big/upload.bin", sb.workspace().display());
    let file = tokio::fs::File::open(&source).await.unwrap();
    assert_eq!(link.upload(&remote, file, |_| {}).await.unwrap(), None);
    assert_eq!(format!("{:x}", Sha256::digest(std::fs::read(&remote).unwrap())), expected);

    let back = local.path().join("back.bin");
    let sink = tokio::fs::File::create(&back).await.unwrap();
    let done = link.download(&remote, sink, |_, _| {}).await.unwrap().unwrap();
    assert_eq!((done.size, done.sha256.as_str()), (100 << 20, expected.as_str()));
    assert_eq!(format!("{:x}", Sha256::digest(std::fs::read(&back).unwrap())), expected);
    // agentd streamed it: its peak memory stays far below the file size.
    let peak_kb = agentd_tests::status_kb(sb.pid(), "VmHWM");
    assert!(peak_kb < 48 * 1024, "agentd peak RSS {peak_kb} kB for a 100 MiB transfer");
}
