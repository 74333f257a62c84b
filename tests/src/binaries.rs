//! Where the binaries under test are: the workspace's, built next to the test executable, and the
//! static agentd (the benchmarks' and the injected one).

use std::path::PathBuf;

/// Path of a workspace binary built next to the test executable (`target/<profile>/NAME`).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace` first", path.display());
    path
}

/// The agentd a benchmark runs: the static one (`target/x86_64-unknown-linux-gnu/release/agentd`)
/// when it exists, else `target/release/agentd`.
pub fn bench_agentd() -> PathBuf {
    let release = binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).expect("target dir");
    let static_bin = target.join("x86_64-unknown-linux-gnu/release/agentd");
    if static_bin.is_file() { static_bin } else { release }
}

/// The static agentd built for injection (`images/build.sh` builds it).
pub fn static_agentd() -> PathBuf {
    let release = binary("agentd");
    let target = release.parent().and_then(|p| p.parent()).expect("target dir");
    let path = target.join("x86_64-unknown-linux-gnu/release/agentd");
    assert!(path.is_file(), "{} is missing: images/build.sh builds it", path.display());
    path
}
