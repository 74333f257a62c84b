//! The kubeconfig the fake writes: one cluster (`server: http://127.0.0.1:PORT`), one user (a
//! bearer token), one context (namespace `default`), and `current-context` naming it. Clients
//! With TLS the cluster also carries `certificate-authority-data` (the fake's CA). Clients
//! that load it (`kubectl --kubeconfig`, `kubernetes.config.load_kube_config`, kube-rs
//! `Config::infer` through `KUBECONFIG`) need nothing else.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// The cluster, user and context name.
pub const NAME: &str = "fake-kube";

/// The kubeconfig's text.
pub fn render(server: &str, token: &str, namespace: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine as _;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {NAME}\n  \
           cluster:\n{ca}    \
             server: {server}\n\
         users:\n\
         - name: {NAME}\n  \
           user:\n    \
             token: {token}\n\
         contexts:\n\
         - name: {NAME}\n  \
           context:\n    \
             cluster: {NAME}\n    \
             user: {NAME}\n    \
             namespace: {namespace}\n\
         current-context: {NAME}\n\
         preferences: {{}}\n"
    )
}

/// Writes the kubeconfig to `path`, readable by its owner only (it holds the token).
pub fn write(
    path: &Path,
    server: &str,
    token: &str,
    namespace: &str,
    ca_pem: Option<&str>,
) -> std::io::Result<()> {
    let mut file =
        std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(render(server, token, namespace, ca_pem).as_bytes())
}
