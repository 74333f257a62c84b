//! Server-side printing: the `Table` (`meta.k8s.io/v1`) a client gets for `get` and `list` when
//! it asks for one (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, as `kubectl get`
//! does). Pods get kubectl's columns (NAME, READY, STATUS, RESTARTS, AGE, and IP, NODE at
//! `-o wide`), computed as the apiserver's printer does; every other type gets NAME and AGE.

use serde_json::{Value, json};

use super::resource::ResourceType;

/// Whether the request's `Accept` asks for a `Table` first.
pub fn wanted(accept: Option<&str>) -> bool {
    accept
        .and_then(|a| a.split(',').next())
        .is_some_and(|first| first.contains("as=Table") && first.contains("g=meta.k8s.io"))
}

fn column(name: &str, format: &str, description: &str, priority: u8) -> Value {
    json!({"name": name, "type": "string", "format": format, "description": description, "priority": priority})
}

/// The `Table` of `objects`.
pub fn render(resource: &ResourceType, objects: &[Value], revision: u64) -> Value {
    let pods = resource.group.is_empty() && resource.plural == "pods";
    let mut columns = vec![column("Name", "name", "Name must be unique within a namespace.", 0)];
    if pods {
        columns.extend([
            column("Ready", "", "The aggregate readiness state of this pod for accepting traffic.", 0),
            column("Status", "", "The aggregate status of the containers in this pod.", 0),
            column("Restarts", "", "The number of times the containers in this pod have been restarted.", 0),
        ]);
    }
    columns.push(column(
        "Age",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        0,
    ));
    if pods {
        columns.extend([
            column("IP", "", "IP address allocated to the pod.", 1),
            column("Node", "", "Name of the node the pod is scheduled on.", 1),
        ]);
    }
    let rows: Vec<Value> = objects
        .iter()
        .map(|object| {
            let name = object.pointer("/metadata/name").cloned().unwrap_or(json!(""));
            let age = json!(age(object.pointer("/metadata/creationTimestamp").and_then(Value::as_str)));
            let cells = if pods {
                let (ready, status, restarts) = pod_columns(object);
                let ip = object.pointer("/status/podIP").and_then(Value::as_str).unwrap_or("<none>");
                let node = object.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("<none>");
                vec![name, json!(ready), json!(status), json!(restarts), age, json!(ip), json!(node)]
            } else {
                vec![name, age]
            };
            json!({
                "cells": cells,
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": object["metadata"]},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": revision.to_string()},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// READY (`1/1`), STATUS (the phase, or the reason a container gives), RESTARTS.
fn pod_columns(pod: &Value) -> (String, String, i64) {
    let list = |key: &str| pod["status"][key].as_array().cloned().unwrap_or_default();
    let (containers, inits) = (list("containerStatuses"), list("initContainerStatuses"));
    let total = pod.pointer("/spec/containers").and_then(Value::as_array).map_or(0, Vec::len);
    let ready = containers.iter().filter(|c| c["ready"] == true).count();
    let restarts = containers.iter().chain(&inits).filter_map(|c| c["restartCount"].as_i64()).sum();
    let mut status = pod
        .pointer("/status/reason")
        .or(pod.pointer("/status/phase"))
        .and_then(Value::as_str)
        .unwrap_or("Pending")
        .to_owned();
    let init_total = pod.pointer("/spec/initContainers").and_then(Value::as_array).map_or(0, Vec::len);
    let mut initializing = false;
    for (i, init) in inits.iter().enumerate() {
        let terminated = init.pointer("/state/terminated");
        if terminated.and_then(|t| t["exitCode"].as_i64()) == Some(0) {
            continue;
        }
        initializing = true;
        status = match (terminated, init.pointer("/state/waiting/reason").and_then(Value::as_str)) {
            (Some(t), _) => format!("Init:{}", t["reason"].as_str().unwrap_or("Error")),
            (None, Some(reason)) if reason != "PodInitializing" => format!("Init:{reason}"),
            _ => format!("Init:{i}/{init_total}"),
        };
        break;
    }
    if !initializing {
        for container in containers.iter().rev() {
            if let Some(reason) = container.pointer("/state/waiting/reason").and_then(Value::as_str) {
                status = reason.to_owned();
            } else if let Some(terminated) = container.pointer("/state/terminated") {
                status = terminated["reason"].as_str().unwrap_or("Completed").to_owned();
            }
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        status = "Terminating".to_owned();
    }
    (format!("{ready}/{total}"), status, restarts)
}

/// kubectl's age: `42s`, `3m12s`, `25m`, `5h10m`, `3d`.
fn age(created: Option<&str>) -> String {
    let Some(created) = created.and_then(parse_rfc3339) else {
        return "<unknown>".to_owned();
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let s = now.saturating_sub(created);
    match s {
        0..120 => format!("{s}s"),
        120..600 if s % 60 != 0 => format!("{}m{}s", s / 60, s % 60),
        120..10_800 => format!("{}m", s / 60),
        10_800..28_800 if s % 3600 >= 60 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        10_800..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SSZ`.
fn parse_rfc3339(text: &str) -> Option<u64> {
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_and_pod_columns_read_as_kubectl_prints_them() {
        let epoch = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_780_000_000);
        assert_eq!(parse_rfc3339(&super::super::store::rfc3339(epoch)), Some(1_780_000_000));
        let pod = json!({
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]},
            "status": {"phase": "Pending",
                "initContainerStatuses": [{"name": "i", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                "containerStatuses": [
                    {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                    {"name": "b", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImageNeverPull"}}},
                ]},
        });
        assert_eq!(pod_columns(&pod), ("1/2".to_owned(), "ErrImageNeverPull".to_owned(), 2));
    }
}
