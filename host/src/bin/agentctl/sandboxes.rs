//! `sandbox ls|rm|pause|resume|gc|kube-template`: the sandboxes agentd created, across kinds,
//! through each kind's provider.

use std::process::ExitCode;

use agentd_host::provider::{self, Kind, SandboxInfo};

use crate::{Cli, say, shown};

/// Kinds left out of a listing, each with the reason.
type Skipped = Vec<(Kind, String)>;

/// The providers of the kinds that can be listed here: built, and configured (Daytona: its API
/// key; Modal: its token). The others come back with the reason.
fn listable() -> (Vec<Box<dyn provider::Provider>>, Skipped) {
    let (mut providers, mut skipped) = (Vec::new(), Vec::new());
    for kind in Kind::ALL {
        let found = match kind.unavailable() {
            None => provider::provider(kind).map_err(|e| e.to_string()),
            Some(why) => Err(why),
        };
        match found {
            Ok(provider) => providers.push(provider),
            Err(why) => skipped.push((kind, why)),
        }
    }
    (providers, skipped)
}

/// Every sandbox agentd created, across the listable kinds, and the kinds whose listing failed
/// (each said on stderr as it fails; the others are still listed).
async fn list_all() -> (Vec<SandboxInfo>, Vec<Kind>) {
    let (providers, _skipped) = listable();
    let (mut all, mut failed) = (Vec::new(), Vec::new());
    for provider in providers {
        match provider.list().await {
            Ok(listed) => all.extend(listed),
            Err(err) => {
                say(format!("{}: {err}", provider.kind()));
                failed.push(provider.kind());
            }
        }
    }
    (all, failed)
}

/// How `sandbox ls` shows an id: Docker's are shortened as `docker ps` does (`rm` takes prefixes).
fn short_id(info: &SandboxInfo) -> &str {
    match info.kind.row().and_then(|row| row.short_id) {
        // By `get`: an id that is not ASCII (a hostile listing) is shown whole, not cut mid-character.
        Some(width) => info.id.get(..width).unwrap_or(&info.id),
        None => &info.id,
    }
}

/// Exit status 1 when a provider could not be listed (the others are shown all the same).
pub async fn sandbox_ls(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (all, failed) = list_all().await;
    let status = if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    if cli.json {
        println!("{}", serde_json::to_string(&all)?);
        return Ok(status);
    }
    let rows: Vec<[std::borrow::Cow<'_, str>; 4]> = all
        .iter()
        .map(|i| [i.kind.name().into(), shown(short_id(i)), shown(&i.source), shown(&i.state)])
        .collect();
    let header = ["KIND", "ID", "SOURCE", "STATE"].map(std::borrow::Cow::from);
    let mut widths = header.each_ref().map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let [kind, id, source, state] = row;
        println!("{kind:<0$}  {id:<1$}  {source:<2$}  {state}", widths[0], widths[1], widths[2]);
    }
    Ok(status)
}

/// What `sandbox rm|pause|resume` does to each sandbox.
#[derive(Clone, Copy)]
pub enum Verb {
    Remove,
    Pause,
    Resume,
}

/// `KIND:ID` goes to that kind; a bare id (or a prefix of one) is looked up among what `ls` lists.
pub async fn by_id(ids: &[String], verb: Verb) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let mut listed = None;
    for id in ids {
        let (kind, id) =
            match id.split_once(':').and_then(|(head, rest)| Some((Kind::from_name(head)?, rest))) {
                Some((kind, rest)) => (kind, rest.to_owned()),
                None => {
                    if listed.is_none() {
                        listed = Some(list_all().await.0);
                    }
                    let all = listed.as_deref().unwrap_or_default();
                    let found: Vec<&SandboxInfo> =
                        all.iter().filter(|i| i.id.starts_with(id.as_str())).collect();
                    match found.as_slice() {
                        [one] => (one.kind, one.id.clone()),
                        [] => {
                            return Err(format!(
                                "no sandbox agentd created has the id {} (see `agentctl sandbox ls`)",
                                shown(id)
                            )
                            .into());
                        }
                        _ => {
                            return Err(format!(
                                "{} names {} sandboxes; give more of the id or KIND:ID",
                                shown(id),
                                found.len()
                            )
                            .into());
                        }
                    }
                }
            };
        if let Some(why) = kind.unavailable() {
            return Err(why.into());
        }
        let provider = provider::provider(kind)?;
        let done = match verb {
            Verb::Remove => provider.remove(&id).await.map(|()| "removed"),
            Verb::Pause => provider.pause(&id).await.map(|()| "paused"),
            Verb::Resume => provider.resume(&id).await.map(|()| "resumed"),
        };
        println!("{} {kind}:{}", done?, shown(&id));
    }
    Ok(ExitCode::SUCCESS)
}

/// Removes what every provider lists. A listing or a removal that fails (an id of the wrong
/// shape is refused before any request) is said and skipped; the rest goes on, and the exit
/// status is then 1.
pub async fn gc() -> Result<ExitCode, Box<dyn std::error::Error>> {
    let (providers, skipped) = listable();
    for (kind, why) in skipped {
        say(format!("{kind} skipped: {why}"));
    }
    let (mut removed, mut failed) = (0, 0);
    for provider in providers {
        let kind = provider.kind();
        let listed = match provider.list().await {
            Ok(listed) => listed,
            Err(err) => {
                say(format!("{kind}: {err}"));
                failed += 1;
                continue;
            }
        };
        for info in listed {
            match provider.remove(&info.id).await {
                Ok(()) => {
                    println!("removed {kind}:{} ({})", shown(short_id(&info)), shown(&info.source));
                    removed += 1;
                }
                Err(err) => {
                    say(format!("{kind}: not removed: {err}"));
                    failed += 1;
                }
            }
        }
    }
    println!("{removed} sandbox(es) removed");
    if failed > 0 {
        say(format!("{failed} listing(s) or removal(s) failed"));
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `sandbox kube-template`: an agent-sandbox SandboxTemplate and SandboxWarmPool, printed as YAML
/// or applied to the cluster.
pub async fn kube_template(
    image: &str,
    name: &str,
    replicas: u32,
    agentd_image: &str,
    apply: bool,
) -> Result<ExitCode, Box<dyn std::error::Error>> {
    use agentd_host::adapters::kubernetes::{Cluster, KubernetesOptions, manifests};
    let documents =
        [manifests::sandbox_template(name, image, agentd_image), manifests::warm_pool(name, name, replicas)];
    if apply {
        let cluster = Cluster::connect(&KubernetesOptions::default()).await?;
        manifests::apply(&cluster, &documents).await?;
        println!("applied SandboxTemplate {name} and SandboxWarmPool {name} in {}", cluster.namespace);
    } else {
        print!("{}", manifests::to_yaml(&documents));
    }
    Ok(ExitCode::SUCCESS)
}
