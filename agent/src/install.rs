//! `agentd install DIR`: copies this agentd to `DIR/agentd` (mode 0755, written beside it and
//! renamed over, so a running copy is never rewritten in place). What an initContainer runs to put
//! the static agentd into a volume its Pod's sandbox container mounts (docs/providers.md, "Kubernetes").

use std::path::Path;
use std::process::ExitCode;

pub fn install(dir: &Path) -> ExitCode {
    match copy_self(dir) {
        Ok(target) => {
            println!("{}", target.display());
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("agentd install: {err}");
            ExitCode::FAILURE
        }
    }
}

fn copy_self(dir: &Path) -> std::io::Result<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let this = std::env::current_exe()?;
    std::fs::create_dir_all(dir)?;
    let target = dir.join("agentd");
    let staged = dir.join(format!(".agentd.{}", std::process::id()));
    std::fs::copy(&this, &staged)?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&staged, &target)?;
    Ok(target)
}
