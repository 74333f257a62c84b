//! `CompositeSandbox` over real agentds: the embedded default for commands and machine paths, and
//! agentds serving `--root` (their `/` is a directory of their own) routed at `/scratch/` and
//! `/scratch/deep/`, with deepagents' `CompositeBackend` semantics; and in-memory `StateSandbox`es
//! routed at `/state/` and `/state/deep/` (deepagents' `StateBackend` as a route).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::sync::Arc;

use agentd_host::{AgentdSandbox, BaseSandbox, CompositeSandbox, LocalSandbox, StateSandbox};
use agentd_tests::Daemon;

/// An agentd whose `/` is its own new directory, and a link to it.
async fn rooted() -> (Daemon, tempfile::TempDir, Arc<AgentdSandbox>) {
    let root = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with(&["--root", root.path().to_str().unwrap()]);
    let sandbox = AgentdSandbox::connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    (daemon, root, Arc::new(sandbox))
}

#[tokio::test]
async fn routes_split_the_tree_and_merge_at_the_root() {
    let default = Arc::new(LocalSandbox::start().await.unwrap());
    let ws = default.workspace().canonicalize().unwrap().display().to_string();
    let (_d1, scratch_dir, scratch) = rooted().await;
    let (_d2, deep_dir, deep) = rooted().await;
    let sb = CompositeSandbox::new(
        default.clone(),
        [
            ("/scratch/", scratch.clone() as Arc<dyn BaseSandbox>),
            ("/scratch/deep/", deep.clone() as Arc<dyn BaseSandbox>),
        ],
    );

    // Writes land where the routes say, and answer with the path as given.
    let w = sb.write(&format!("{ws}/main.py"), "needle in default\n").await.unwrap();
    assert_eq!(w.path.as_deref(), Some(format!("{ws}/main.py").as_str()));
    let w = sb.write("/scratch/notes.md", "needle in scratch\n").await.unwrap();
    assert_eq!((w.error, w.path.as_deref()), (None, Some("/scratch/notes.md")));
    assert_eq!(std::fs::read_to_string(scratch_dir.path().join("notes.md")).unwrap(), "needle in scratch\n");
    // The longest prefix wins.
    sb.write("/scratch/deep/x.md", "needle deep\n").await.unwrap();
    assert!(deep_dir.path().join("x.md").exists() && !scratch_dir.path().join("deep").exists());

    // Read, edit and delete through a route.
    let read = sb.read("/scratch/notes.md", 0, 10).await.unwrap();
    assert_eq!(read.file_data.unwrap().content, "needle in scratch");
    let edit = sb.edit("/scratch/notes.md", "scratch", "route", false).await.unwrap();
    assert_eq!((edit.path.as_deref(), edit.occurrences), (Some("/scratch/notes.md"), Some(1)));
    assert_eq!(std::fs::read_to_string(scratch_dir.path().join("notes.md")).unwrap(), "needle in route\n");

    // ls: a route lists its own entries under the prefix; `/` shows the routes as directories.
    let listed = sb.ls("/scratch").await.unwrap().entries.unwrap();
    assert_eq!(listed.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(), ["/scratch/notes.md"]);
    let top = sb.ls("/").await.unwrap().entries.unwrap();
    for route in ["/scratch/", "/scratch/deep/"] {
        assert!(top.iter().any(|e| e.path == route && e.is_dir), "{route} missing from ls /: {top:?}");
    }
    assert!(top.iter().any(|e| e.path == "/usr"), "the default's / is there too");

    // glob and grep from a route, and merged from `/`.
    let globbed = sb.glob("**/*.md", Some("/scratch")).await.unwrap().matches.unwrap();
    assert_eq!(globbed.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(), ["/scratch/notes.md"]);
    let merged = sb.grep("needle", Some("/"), Some("*.md"), None).await.unwrap();
    let paths: Vec<&str> = merged.matches.as_ref().unwrap().iter().map(|m| m.path.as_str()).collect();
    assert!(paths.contains(&"/scratch/notes.md") && paths.contains(&"/scratch/deep/x.md"), "{paths:?}");
    let in_ws = sb.grep("needle", Some(&ws), None, None).await.unwrap().matches.unwrap();
    assert_eq!(in_ws.len(), 1, "a path beneath no route searches the default only: {in_ws:?}");
    let capped = sb.grep("needle", None, Some("*.md"), Some(1)).await.unwrap();
    assert!(capped.truncated && capped.matches.unwrap().len() <= 1);

    // execute goes to the default.
    let r = sb.execute("pwd", None).await.unwrap();
    assert_eq!(r.output.trim(), ws);

    // A batch across routes keeps its order and its paths.
    let up = sb
        .upload_files(&[
            ("/scratch/a".to_owned(), b"1".to_vec()),
            (format!("{ws}/b"), b"2".to_vec()),
            ("/scratch/deep/c".to_owned(), b"3".to_vec()),
        ])
        .await
        .unwrap();
    assert_eq!(
        up.iter().map(|u| (u.path.as_str(), u.error.is_none())).collect::<Vec<_>>(),
        [("/scratch/a", true), (format!("{ws}/b").as_str(), true), ("/scratch/deep/c", true)]
    );
    let down = sb
        .download_files(&[
            "/scratch/deep/c".to_owned(),
            format!("{ws}/b"),
            "/scratch/a".to_owned(),
            "/scratch/none".to_owned(),
        ])
        .await
        .unwrap();
    let got: Vec<(&str, Option<&[u8]>)> =
        down.iter().map(|d| (d.path.as_str(), d.content.as_deref())).collect();
    assert_eq!(
        got[..3],
        [
            ("/scratch/deep/c", Some(&b"3"[..])),
            (format!("{ws}/b").as_str(), Some(&b"2"[..])),
            ("/scratch/a", Some(&b"1"[..]))
        ]
    );
    assert_eq!(down[3].error.as_deref(), Some("file_not_found"));

    let deleted = sb.delete("/scratch/notes.md").await.unwrap();
    assert_eq!((deleted.error, deleted.path.as_deref()), (None, Some("/scratch/notes.md")));
    assert!(!scratch_dir.path().join("notes.md").exists());
}

#[tokio::test]
async fn state_routes_keep_files_in_memory() {
    let default = Arc::new(LocalSandbox::start().await.unwrap());
    let ws = default.workspace().canonicalize().unwrap().display().to_string();
    let (state, deep) = (Arc::new(StateSandbox::new()), Arc::new(StateSandbox::new()));
    let sb = CompositeSandbox::new(
        default.clone(),
        [
            ("/state/", state.clone() as Arc<dyn BaseSandbox>),
            ("/state/deep/", deep.clone() as Arc<dyn BaseSandbox>),
        ],
    );
    // A needle no file of the machine holds, so the default's part of a merged search is known.
    let needle = "needle-7f3a9c-state";

    // Writes land in memory, under the route's own `/`; nothing reaches the machine.
    let w = sb.write("/state/notes.md", &format!("{needle} one\n")).await.unwrap();
    assert_eq!((w.error, w.path.as_deref()), (None, Some("/state/notes.md")));
    assert_eq!(state.file("/notes.md").unwrap().data.content, format!("{needle} one\n"));
    assert!(!std::path::Path::new("/state/notes.md").exists());
    sb.write("/state/deep/x.md", &format!("{needle} deep\n")).await.unwrap();
    assert!(deep.file("/x.md").is_some() && state.file("/deep/x.md").is_none(), "the longest prefix wins");
    sb.write(&format!("{ws}/main.md"), &format!("{needle} default\n")).await.unwrap();

    // Read, edit, and the reference's error strings, through the route.
    let read = sb.read("/state/notes.md", 0, 10).await.unwrap();
    assert_eq!(read.file_data.unwrap().content, format!("{needle} one\n"));
    let missing = sb.read("/state/none.md", 0, 10).await.unwrap();
    assert_eq!(missing.error.as_deref(), Some("File '/none.md' not found"));
    let edit = sb.edit("/state/notes.md", "one", "two", false).await.unwrap();
    assert_eq!((edit.path.as_deref(), edit.occurrences), (Some("/state/notes.md"), Some(1)));
    assert_eq!(state.file("/notes.md").unwrap().data.content, format!("{needle} two\n"));

    // ls: a route lists its keys under the prefix; `/` shows the routes beside the machine's `/`.
    let listed = sb.ls("/state").await.unwrap().entries.unwrap();
    let listed: Vec<(&str, bool)> = listed.iter().map(|e| (e.path.as_str(), e.is_dir)).collect();
    assert_eq!(listed, [("/state/notes.md", false)]);
    let top = sb.ls("/").await.unwrap().entries.unwrap();
    for route in ["/state/", "/state/deep/"] {
        assert!(top.iter().any(|e| e.path == route && e.is_dir), "{route} missing from ls /: {top:?}");
    }
    assert!(top.iter().any(|e| e.path == "/usr"), "the default's / is there too");

    // glob and grep within a route, and merged from `/`.
    let globbed = sb.glob("*.md", Some("/state")).await.unwrap().matches.unwrap();
    assert_eq!(globbed.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(), ["/state/notes.md"]);
    let anchored = sb.glob("/state/*.md", None).await.unwrap().matches.unwrap();
    assert_eq!(anchored.iter().map(|m| m.path.as_str()).collect::<Vec<_>>(), ["/state/notes.md"]);
    let merged = sb.grep(needle, Some("/"), Some("*.md"), None).await.unwrap();
    let mut found: Vec<&str> = merged.matches.as_ref().unwrap().iter().map(|m| m.path.as_str()).collect();
    found.sort_unstable();
    let main = format!("{ws}/main.md");
    let mut expected = vec![main.as_str(), "/state/deep/x.md", "/state/notes.md"];
    expected.sort_unstable();
    assert_eq!(found, expected);
    let routed = sb.grep(needle, Some("/state/deep"), None, None).await.unwrap().matches.unwrap();
    assert_eq!((routed.len(), routed[0].path.as_str()), (1, "/state/deep/x.md"));

    // execute still goes to the default.
    let r = sb.execute("pwd", None).await.unwrap();
    assert_eq!(r.output.trim(), ws);

    // Uploads and downloads: binary kept as bytes, a batch across routes in order.
    let up = sb
        .upload_files(&[
            ("/state/bin".to_owned(), b"\xff\x00".to_vec()),
            (format!("{ws}/b"), b"2".to_vec()),
            ("/state/deep/c".to_owned(), b"3".to_vec()),
        ])
        .await
        .unwrap();
    assert!(up.iter().all(|u| u.error.is_none()), "{up:?}");
    assert_eq!(state.file("/bin").unwrap().data.content, "/wA=", "non-UTF-8 is stored as base64");
    let down = sb
        .download_files(&[
            "/state/deep/c".to_owned(),
            "/state/bin".to_owned(),
            format!("{ws}/b"),
            "/state/none".to_owned(),
        ])
        .await
        .unwrap();
    #[expect(clippy::type_complexity, reason = "the tuple is the comparison's shape, spelled out once")]
    let got: Vec<(&str, Option<&[u8]>, Option<&str>)> =
        down.iter().map(|d| (d.path.as_str(), d.content.as_deref(), d.error.as_deref())).collect();
    assert_eq!(
        got,
        [
            ("/state/deep/c", Some(&b"3"[..]), None),
            ("/state/bin", Some(&b"\xff\x00"[..]), None),
            (format!("{ws}/b").as_str(), Some(&b"2"[..]), None),
            ("/state/none", None, Some("file_not_found")),
        ]
    );

    // delete: a key, then a whole route's tree.
    let deleted = sb.delete("/state/notes.md").await.unwrap();
    assert_eq!((deleted.error, deleted.path.as_deref()), (None, Some("/state/notes.md")));
    assert!(state.file("/notes.md").is_none());
    let gone = sb.delete("/state/notes.md").await.unwrap();
    assert_eq!(gone.error.as_deref(), Some("Error: File '/notes.md' not found"));
    assert_eq!(sb.delete("/state/deep").await.unwrap().path.as_deref(), Some("/state/deep"));
    assert!(deep.ls("/").await.unwrap().entries.unwrap().is_empty());
}
