//! Replies stay within `MAX_REPLY_BYTES`, and agentd's memory stays bounded while it builds them,
//! whatever the files: the three cases of the issue (a `grep ""` of 2 000 000 lines, a `grep` of
//! one 256 MiB line, a `read` of a 512 MiB file that fails the UTF-8 sniff), against a real agentd
//! over its websocket, its VmRSS sampled while each runs.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agentd_protocol::limits::{MAX_READ_BASE64_BYTES, MAX_REPLY_BYTES};
use agentd_tests::{Daemon, Ws, raw_connect, recv_json, send_text, status_kb};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

/// Peak VmRSS agentd may reach on the three cases (debug build; measured 51–72 MB here).
/// Before the bounds (release build): 343 MB, 1 GB and 1.4 GB.
const RSS_CEILING_KB: u64 = 120 * 1024;

/// Peak VmRSS while agentd sends a base64 `read` of the largest size it returns, a reply of nearly
/// `MAX_REPLY_BYTES` (measured ~116 MB in a debug build: the base64 text, the reply's JSON and the
/// websocket frame, each ~16 MiB, on top of what the allocator kept from the greps before).
const FULL_REPLY_RSS_CEILING_KB: u64 = 160 * 1024;

async fn greeted(daemon: &Daemon) -> Ws {
    let mut ws = raw_connect(&daemon.url, Some(&daemon.token)).await.unwrap();
    send_text(&mut ws, json!({"type": "hello", "id": 0, "versions": [1]}).to_string()).await;
    let hello = recv_json(&mut ws).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    ws
}

/// Sends `request`, sampling agentd's VmRSS every 5 ms until its reply arrives; returns the reply's
/// text length, its result, and the highest VmRSS seen (kB).
async fn measured(ws: &mut Ws, pid: u32, request: Value) -> (usize, Value, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(status_kb(pid, "VmRSS")));
    let sampler = {
        let (stop, peak) = (Arc::clone(&stop), Arc::clone(&peak));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(status_kb(pid, "VmRSS"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let id = request["id"].as_u64().unwrap();
    send_text(ws, request.to_string()).await;
    let text = loop {
        let frame = tokio::time::timeout(Duration::from_secs(60), ws.next()).await.expect("reply in time");
        if let Message::Text(text) = frame.expect("open").expect("frame") {
            break text;
        }
    };
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let reply: Value = serde_json::from_str(text.as_str()).unwrap();
    assert_eq!((reply["type"].as_str(), reply["id"].as_u64()), (Some("fs_result"), Some(id)), "{reply:.300}");
    (text.len(), reply["result"].clone(), peak.load(Ordering::Relaxed))
}

/// `len` bytes of `fill` in 1 MiB writes, then `tail`.
fn write_file(path: &Path, fill: u8, len: usize, tail: &[u8]) {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let block = vec![fill; 1 << 20];
    for _ in 0..len / block.len() {
        file.write_all(&block).unwrap();
    }
    file.write_all(&block[..len % block.len()]).unwrap();
    file.write_all(tail).unwrap();
    file.flush().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_greps_and_reads_get_bounded_replies_in_bounded_memory() {
    let daemon = Daemon::start();
    let pid = daemon.pid();
    let dir = daemon.workspace.path();
    std::fs::write(dir.join("lines.txt"), b"a\n".repeat(2_000_000)).unwrap();
    write_file(&dir.join("one.txt"), b'x', 256 << 20, b"needle\n");
    // Sparse: a byte that fails the sniff, then zeros.
    let bin = std::fs::File::create(dir.join("bin.txt")).unwrap();
    (&bin).write_all(b"\xff").unwrap();
    bin.set_len(512 << 20).unwrap();
    drop(bin);

    let mut ws = greeted(&daemon).await;
    let start = status_kb(pid, "VmRSS");
    let mut peaks = Vec::new();

    // Every line matches: the result stops at the budget, truncated, the first lines in order.
    let t = Instant::now();
    let (len, result, peak) = measured(
        &mut ws,
        pid,
        json!({"type": "fs", "id": 1, "verb": "grep", "pattern": "", "path": "lines.txt"}),
    )
    .await;
    let grep = &result["grep"];
    let matches = grep["matches"].as_array().unwrap();
    eprintln!(
        "grep \"\" over 2M lines: reply {len} bytes, {} matches, peak VmRSS {peak} kB, {:?}",
        matches.len(),
        t.elapsed()
    );
    assert!(len <= MAX_REPLY_BYTES, "reply of {len} bytes");
    assert!(len > MAX_REPLY_BYTES - 64 * 1024, "the budget is used: {len} bytes");
    assert_eq!(grep["truncated"], true);
    assert!(matches.len() > 300_000 && matches.len() < 2_000_000, "{}", matches.len());
    assert_eq!(matches[0], json!({"path": "lines.txt", "line": 1, "text": "a"}));
    assert_eq!(matches.last().unwrap()["line"].as_u64(), Some(matches.len() as u64));
    peaks.push(("grep \"\" lines.txt", peak));

    // One line of 256 MiB holding the pattern at its end, on both routes: it cannot be shown, so
    // the result is truncated; a pattern it lacks gives nothing, untruncated.
    for (id, pattern, glob, truncated) in
        [(2, "needle", None, true), (3, "needle", Some("/one.txt"), true), (4, "absent", None, false)]
    {
        let t = Instant::now();
        let mut request = json!({"type": "fs", "id": id, "verb": "grep", "pattern": pattern, "path": "."});
        if let Some(glob) = glob {
            request["glob"] = json!(glob);
        } else {
            request["path"] = json!("one.txt");
        }
        let (len, result, peak) = measured(&mut ws, pid, request).await;
        eprintln!(
            "grep {pattern} (glob {glob:?}) over one 256 MiB line: reply {len} bytes, peak VmRSS {peak} kB, {:?}",
            t.elapsed()
        );
        assert_eq!(result["grep"], json!({"error": null, "matches": [], "truncated": truncated}), "{glob:?}");
        peaks.push(("grep one.txt", peak));
    }

    // 512 MiB that fail the sniff: refused with the binary-preview error, nothing read whole.
    let t = Instant::now();
    let (len, result, peak) =
        measured(&mut ws, pid, json!({"type": "fs", "id": 5, "verb": "read", "path": "bin.txt"})).await;
    eprintln!("read of 512 MiB non-UTF-8: reply {len} bytes, peak VmRSS {peak} kB, {:?}", t.elapsed());
    assert_eq!(
        result["read"]["error"],
        format!("File 'bin.txt': Binary file exceeds maximum preview size of {MAX_READ_BASE64_BYTES} bytes")
    );
    peaks.push(("read bin.txt", peak));
    // The high-water mark covers peaks too short for the sampler.
    let hwm = status_kb(pid, "VmHWM");
    eprintln!("VmRSS at start {start} kB; VmHWM over the three cases {hwm} kB; ceiling {RSS_CEILING_KB} kB");
    for (case, peak) in peaks {
        assert!(peak < RSS_CEILING_KB, "{case}: peak VmRSS {peak} kB");
    }
    assert!(hwm < RSS_CEILING_KB, "VmHWM {hwm} kB");

    // At the cap it is still returned, as base64, in one reply that fits.
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("bin.txt"))
        .unwrap()
        .set_len(MAX_READ_BASE64_BYTES as u64)
        .unwrap();
    let (len, result, peak) =
        measured(&mut ws, pid, json!({"type": "fs", "id": 6, "verb": "read", "path": "bin.txt"})).await;
    eprintln!("read of {MAX_READ_BASE64_BYTES} bytes non-UTF-8: reply {len} bytes, peak VmRSS {peak} kB");
    assert!(len <= MAX_REPLY_BYTES, "reply of {len} bytes");
    assert_eq!(result["read"]["file_data"]["encoding"], "base64");
    assert_eq!(result["read"]["file_data"]["content"].as_str().unwrap().len(), MAX_READ_BASE64_BYTES / 3 * 4);
    let hwm = status_kb(pid, "VmHWM");
    eprintln!("VmHWM after it {hwm} kB; ceiling {FULL_REPLY_RSS_CEILING_KB} kB");
    assert!(peak.max(hwm) < FULL_REPLY_RSS_CEILING_KB, "VmHWM {hwm} kB");
    for name in ["lines.txt", "one.txt", "bin.txt"] {
        std::fs::remove_file(dir.join(name)).unwrap();
    }
}
