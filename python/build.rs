//! With the `bundle-agentd` feature (on in every maturin build: `pyproject.toml`), builds the static
//! agentd and leaves it as `$OUT_DIR/agentd`, where maturin takes it into the wheel as
//! `agentd/bin/agentd`. Without the feature (`cargo build --workspace`, clippy) it does nothing.
//!
//! The inner build is `cargo build --release -p agentd --target <this target>` with
//! `-C target-feature=+crt-static`, as `images/build.sh` builds it, on a copy of the workspace
//! reduced to `agent/` and `protocol/` in `$OUT_DIR/workspace`, with its own target directory in
//! `$OUT_DIR/target`: a cargo running inside cargo's build must not wait on the outer build's lock,
//! and a maturin sdist carries `agent/` but not as a member of the workspace it rewrites.

#[cfg(feature = "bundle-agentd")]
fn main() -> std::process::ExitCode {
    match bundle::build() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            // Cargo shows a failed build script's stderr; this line is the part a person acts on.
            eprintln!("error: cannot bundle the static agentd into the Python package: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "bundle-agentd"))]
fn main() {
    println!("cargo::rerun-if-changed=build.rs");
}

#[cfg(feature = "bundle-agentd")]
mod bundle {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::{env, fs, io};

    /// The crates the static agentd is built from, relative to the workspace root.
    const CRATES: [&str; 2] = ["agent", "protocol"];

    #[derive(Debug, thiserror::Error)]
    pub enum BundleError {
        #[error("cargo did not set {0} for the build script")]
        Env(&'static str),
        #[error("agentd runs on Linux with glibc only; this build targets {0}")]
        Target(String),
        #[error(
            "no static glibc (`cc -print-file-name=libc.a` found none): install it (Debian and \
             Ubuntu: libc6-dev; Fedora: glibc-static) and build again"
        )]
        NoStaticGlibc,
        #[error("cannot run `{command}`: {source}")]
        Run { command: String, source: io::Error },
        #[error(
            "`{0}` failed (its output is above); a missing static glibc shows as the linker not \
             finding -lc"
        )]
        InnerBuild(String),
        #[error("{path}: {source}")]
        Io { path: PathBuf, source: io::Error },
        #[error("{path} is not a valid Cargo.toml: {source}")]
        Manifest { path: PathBuf, source: toml::de::Error },
        #[error("{0} has no [workspace] table")]
        NoWorkspace(PathBuf),
    }

    fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BundleError + '_ {
        move |source| BundleError::Io { path: path.to_owned(), source }
    }

    fn var(name: &'static str) -> Result<String, BundleError> {
        env::var(name).map_err(|_| BundleError::Env(name))
    }

    pub fn build() -> Result<(), BundleError> {
        let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR")?);
        let root = manifest_dir.parent().ok_or(BundleError::Env("CARGO_MANIFEST_DIR"))?;
        let out_dir = PathBuf::from(var("OUT_DIR")?);
        let target = var("TARGET")?;
        if !target.ends_with("-linux-gnu") {
            return Err(BundleError::Target(target));
        }
        for watched in ["Cargo.toml", "Cargo.lock"].iter().chain(&CRATES) {
            println!("cargo::rerun-if-changed={}", root.join(watched).display());
        }
        check_static_glibc()?;

        let workspace = out_dir.join("workspace");
        stage_workspace(root, &workspace)?;
        let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let target_dir = out_dir.join("target");
        let mut inner = Command::new(&cargo);
        inner
            .args(["build", "--release", "-p", "agentd", "--target", &target])
            .arg("--manifest-path")
            .arg(workspace.join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target_dir)
            .env("RUSTFLAGS", "-C target-feature=+crt-static");
        // What cargo set for this build script would steer the inner build: the outer flags,
        // target directory, profile overrides, clippy as the compiler. The jobserver
        // (CARGO_MAKEFLAGS) stays, so both builds share the outer build's job slots.
        for (name, _) in env::vars_os() {
            let name = name.to_string_lossy();
            let outer = ["CARGO_FEATURE_", "CARGO_CFG_", "CARGO_PKG_", "CARGO_PROFILE_", "DEP_"]
                .iter()
                .any(|prefix| name.starts_with(prefix));
            if outer {
                inner.env_remove(name.as_ref());
            }
        }
        for name in [
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_MANIFEST_DIR",
            "CARGO_MANIFEST_PATH",
            "RUSTC_WORKSPACE_WRAPPER",
        ] {
            inner.env_remove(name);
        }
        let described = format!(
            "RUSTFLAGS=\"-C target-feature=+crt-static\" {cargo} build --release -p agentd --target \
             {target} (in {})",
            workspace.display()
        );
        let status =
            inner.status().map_err(|source| BundleError::Run { command: described.clone(), source })?;
        if !status.success() {
            return Err(BundleError::InnerBuild(described));
        }
        let built = target_dir.join(&target).join("release").join("agentd");
        let bundled = out_dir.join("agentd");
        fs::copy(&built, &bundled).map_err(io_at(&built))?;
        Ok(())
    }

    /// Fails early, with the package to install, when `cc` (rustc's linker on Linux) has no
    /// `libc.a`: it answers with the bare name when it has none.
    fn check_static_glibc() -> Result<(), BundleError> {
        let asked = Command::new("cc").arg("-print-file-name=libc.a").output().map_err(|source| {
            BundleError::Run { command: "cc -print-file-name=libc.a".to_owned(), source }
        })?;
        let found = PathBuf::from(String::from_utf8_lossy(&asked.stdout).trim());
        if asked.status.success() && found.is_absolute() && found.is_file() {
            Ok(())
        } else {
            Err(BundleError::NoStaticGlibc)
        }
    }

    /// The workspace's manifest (its members reduced to [`CRATES`]), lock file and those crates,
    /// copied to `into`. A file is written only when it differs, so cargo, which compares
    /// modification times, rebuilds only what changed.
    fn stage_workspace(root: &Path, into: &Path) -> Result<(), BundleError> {
        let manifest_path = root.join("Cargo.toml");
        let text = fs::read_to_string(&manifest_path).map_err(io_at(&manifest_path))?;
        let mut manifest: toml::Table =
            text.parse().map_err(|source| BundleError::Manifest { path: manifest_path.clone(), source })?;
        let workspace = manifest
            .get_mut("workspace")
            .and_then(toml::Value::as_table_mut)
            .ok_or_else(|| BundleError::NoWorkspace(manifest_path.clone()))?;
        let members = CRATES.iter().map(|name| toml::Value::from(*name)).collect();
        workspace.insert("members".to_owned(), toml::Value::Array(members));
        workspace.remove("default-members");
        write_if_changed(&into.join("Cargo.toml"), manifest.to_string().as_bytes())?;
        let lock = root.join("Cargo.lock");
        let locked = fs::read(&lock).map_err(io_at(&lock))?;
        write_if_changed(&into.join("Cargo.lock"), &locked)?;
        for name in CRATES {
            copy_tree(&root.join(name), &into.join(name))?;
        }
        Ok(())
    }

    fn copy_tree(from: &Path, to: &Path) -> Result<(), BundleError> {
        for entry in fs::read_dir(from).map_err(io_at(from))? {
            let entry = entry.map_err(io_at(from))?;
            let path = entry.path();
            let file_type = entry.file_type().map_err(io_at(&path))?;
            let dest = to.join(entry.file_name());
            if file_type.is_dir() {
                copy_tree(&path, &dest)?;
            } else {
                let content = fs::read(&path).map_err(io_at(&path))?;
                write_if_changed(&dest, &content)?;
            }
        }
        Ok(())
    }

    fn write_if_changed(path: &Path, content: &[u8]) -> Result<(), BundleError> {
        if fs::read(path).is_ok_and(|old| old == content) {
            return Ok(());
        }
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(io_at(dir))?;
        }
        fs::write(path, content).map_err(io_at(path))
    }
}
