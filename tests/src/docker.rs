//! Docker for the tests: whether the engine and an image are there (else a visible skip), plain
//! containers, Docker sandboxes (baked or injected), and removal on drop.

use crate::binaries::static_agentd;
use crate::skip::{Need, skip};

/// Whether the Docker engine and `image` are there; when not, the running test is [`skip`]ped
/// (a failure when `AGENTD_REQUIRE_DOCKER` is set: CI on a machine with Docker).
pub async fn docker_available(image: &str) -> bool {
    use agentd_host::adapters::docker;
    let reason = match docker::engine().await {
        Err(err) => Some(err.to_string()),
        Ok(engine) => match engine.inspect_image(image).await {
            Ok(_) => None,
            Err(_) => Some(format!("image {image} is missing: run images/build.sh")),
        },
    };
    match reason {
        None => true,
        Some(reason) => {
            skip(Need::Docker, reason);
            false
        }
    }
}

/// A running container from `image` whose process only waits (no agentd), with `mounts` bound at
/// the same paths.
pub fn plain_container(image: &str, mounts: &[&std::path::Path]) -> String {
    let mut args =
        vec!["run".to_owned(), "-d".into(), "--label".into(), agentd_host::adapters::docker::LABEL.into()];
    for dir in mounts {
        args.extend(["-v".to_owned(), format!("{0}:{0}", dir.display())]);
    }
    args.extend(["--entrypoint".into(), "/bin/sh".into(), image.into(), "-c".into(), "sleep 3600".into()]);
    let out = std::process::Command::new("docker").args(&args).output().expect("docker run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A Docker sandbox with `workspace` bind-mounted at the same path and as agentd's working
/// directory: baked (`image` has agentd) or injected into a plain container of `image`. The
/// container is removed when the returned guard drops, and also when a step here fails.
pub async fn docker_sandbox(
    image: &str,
    inject: bool,
    workspace: &std::path::Path,
) -> (agentd_host::adapters::docker::DockerSandbox, RemoveOnDrop) {
    use agentd_host::adapters::docker::{DockerOptions, DockerSandbox};
    let workdir = Some(workspace.to_string_lossy().into_owned());
    if inject {
        let agentd = static_agentd();
        let container = RemoveOnDrop(plain_container(image, &[workspace]));
        let sandbox = DockerSandbox::attach_with(&container.0, &agentd, workdir).await.expect("attach");
        (sandbox, container)
    } else {
        let options = DockerOptions { mounts: vec![workspace.to_owned()], workdir };
        let sandbox = DockerSandbox::create_with(image, &options).await.expect("create");
        let container = RemoveOnDrop(sandbox.container().to_owned());
        (sandbox, container)
    }
}

/// Removes a container when dropped (tests: also when they fail).
pub struct RemoveOnDrop(pub String);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}
