//! agent-sandbox in the fake Kubernetes API server (`agentd_fakes::fake_kube::agent_sandbox`), over
//! HTTP as a client sees it: a claim gets a Sandbox with a real pod (exec into it), a warm pool
//! hands out a ready one, suspend deletes the pod and resume makes a new one, deleting a claim takes
//! its Sandbox and pod, a claim on a missing pool or template says why; and the official
//! `k8s-agent-sandbox` Python client drives a claim through its own API.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_kube::{CONTAINER_LABEL, FakeKube, agent_sandbox};
use agentd_tests::{docker_available, skip};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

const IMAGE: &str = "agentd-base-debian:latest";
const SANDBOXES: &str = "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes";
const CLAIMS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims";
const TEMPLATES: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxtemplates";
const POOLS: &str = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxwarmpools";
const PODS: &str = "/api/v1/namespaces/default/pods";

/// The fake and an authorised HTTP client for it.
struct Api {
    fake: FakeKube,
    http: reqwest::Client,
}

impl Api {
    /// A fake with agent-sandbox installed.
    fn start() -> Self {
        let fake = FakeKube::start();
        agent_sandbox::install(&fake);
        Self { fake, http: reqwest::Client::new() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request =
            self.http.request(method, format!("{}{path}", self.fake.url())).bearer_auth(self.fake.token());
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn create(&self, collection: &str, body: Value) -> Value {
        let (status, object) = self.call(reqwest::Method::POST, collection, Some(body)).await;
        assert_eq!(status, 201, "{object}");
        object
    }

    async fn delete(&self, path: &str) {
        let (status, body) = self.call(reqwest::Method::DELETE, path, None).await;
        assert_eq!(status, 200, "{body}");
    }

    async fn merge_patch(&self, path: &str, patch: Value) -> Value {
        let response = self
            .http
            .patch(format!("{}{path}", self.fake.url()))
            .bearer_auth(self.fake.token())
            .header("Content-Type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        response.json().await.unwrap()
    }

    /// GETs `path` until `done` holds for it (the last answer either way).
    async fn until(&self, path: &str, within: Duration, done: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
        let deadline = Instant::now() + within;
        loop {
            let (status, body) = self.get(path).await;
            if done(status, &body) || Instant::now() > deadline {
                return (status, body);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the claim's Ready condition to be True; the claim.
    async fn until_claim_ready(&self, claim: &str) -> Value {
        let (_, claim) = self
            .until(&format!("{CLAIMS}/{claim}"), Duration::from_secs(60), |_, c| ready(c) == "True")
            .await;
        assert_eq!(ready(&claim), "True", "{claim:#}");
        claim
    }

    /// Runs `command` in the pod through `pods/exec` (v5.channel.k8s.io): (stdout, exit status JSON).
    async fn exec(&self, pod: &str, command: &[&str]) -> (String, Value) {
        let mut query: Vec<String> = command.iter().map(|c| format!("command={}", urlencode(c))).collect();
        query.push("stdout=true".into());
        query.push("stderr=true".into());
        let url =
            format!("{}{PODS}/{pod}/exec?{}", self.fake.url().replacen("http", "ws", 1), query.join("&"));
        let mut request = url.into_client_request().unwrap();
        request
            .headers_mut()
            .insert("Authorization", format!("Bearer {}", self.fake.token()).parse().unwrap());
        request.headers_mut().insert("Sec-WebSocket-Protocol", "v5.channel.k8s.io".parse().unwrap());
        let (mut ws, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        let (mut stdout, mut status) = (Vec::new(), Value::Null);
        while let Some(Ok(message)) = ws.next().await {
            if let Message::Binary(bytes) = message {
                match bytes.first() {
                    Some(1) => stdout.extend_from_slice(&bytes[1..]),
                    Some(3) => status = serde_json::from_slice(&bytes[1..]).unwrap(),
                    _ => {}
                }
            }
        }
        let _ = ws.close(None).await;
        (String::from_utf8_lossy(&stdout).into_owned(), status)
    }
}

fn urlencode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The status of an object's condition `kind` (`""` when it has none).
fn condition<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn ready(object: &Value) -> &str {
    condition(object, "Ready")["status"].as_str().unwrap_or("")
}

fn template(name: &str, pod_spec: Value) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": name},
        "spec": {"podTemplate": {"metadata": {"labels": {"app": name}}, "spec": pod_spec}},
    })
}

/// A pod that stays up doing nothing.
fn sleeper() -> Value {
    json!({"containers": [{"name": "main", "image": IMAGE, "command": ["sleep", "infinity"]}], "terminationGracePeriodSeconds": 0})
}

fn pool(name: &str, template: &str, replicas: u32) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": template}},
    })
}

fn claim(name: &str, pool: &str) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxClaim",
        "metadata": {"name": name},
        "spec": {"warmPoolRef": {"name": pool}},
    })
}

/// This fake's containers (any state).
fn containers_of(fake: &FakeKube) -> Vec<String> {
    agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}={}", fake.instance()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resources_are_served_at_their_real_groups_with_their_crds() {
    // A bare cluster has no agent-sandbox (it is an add-on): its paths are not served.
    let bare = Api { fake: FakeKube::start(), http: reqwest::Client::new() };
    let (status, body) = bare.get(SANDBOXES).await;
    assert_eq!((status, body["reason"].as_str()), (404, Some("NotFound")), "{body}");
    drop(bare);
    let api = Api::start();
    let (_, groups) = api.get("/apis").await;
    let names: Vec<&str> =
        groups["groups"].as_array().unwrap().iter().filter_map(|g| g["name"].as_str()).collect();
    assert!(names.contains(&"agents.x-k8s.io") && names.contains(&"extensions.agents.x-k8s.io"), "{names:?}");
    let (_, core) = api.get("/apis/agents.x-k8s.io/v1beta1").await;
    let sandboxes = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "sandboxes").unwrap();
    assert_eq!(
        (&sandboxes["kind"], &sandboxes["namespaced"], &sandboxes["shortNames"]),
        (&json!("Sandbox"), &json!(true), &json!(["sandbox"]))
    );
    let (_, extensions) = api.get("/apis/extensions.agents.x-k8s.io/v1beta1").await;
    let mut listed: Vec<&str> =
        extensions["resources"].as_array().unwrap().iter().filter_map(|r| r["name"].as_str()).collect();
    listed.sort_unstable();
    assert_eq!(
        listed,
        [
            "sandboxclaims",
            "sandboxclaims/status",
            "sandboxtemplates",
            "sandboxwarmpools",
            "sandboxwarmpools/status"
        ]
    );
    let (_, crds) = api.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").await;
    let mut crd_names: Vec<&str> =
        crds["items"].as_array().unwrap().iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    crd_names.sort_unstable();
    assert_eq!(
        crd_names,
        [
            "sandboxclaims.extensions.agents.x-k8s.io",
            "sandboxes.agents.x-k8s.io",
            "sandboxtemplates.extensions.agents.x-k8s.io",
            "sandboxwarmpools.extensions.agents.x-k8s.io"
        ]
    );
    // The CRDs' schema rules: a required field and an enum, as 422 Invalid; defaults filled in.
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            SANDBOXES,
            Some(json!({"metadata": {"name": "no-template"}, "spec": {}})),
        )
        .await;
    assert_eq!((status, body["reason"].as_str()), (422, Some("Invalid")), "{body}");
    assert_eq!(body["details"]["causes"][0]["field"], "spec.podTemplate", "{body}");
    let (status, body) = api
        .call(
            reqwest::Method::POST,
            SANDBOXES,
            Some(json!({"metadata": {"name": "bad-mode"}, "spec": {"podTemplate": {"spec": sleeper()}, "operatingMode": "Paused"}})),
        )
        .await;
    assert_eq!(
        (status, body["details"]["causes"][0]["reason"].as_str()),
        (422, Some("FieldValueNotSupported")),
        "{body}"
    );
    let made = api.create(POOLS, pool("defaulted", "nothing", 0)).await;
    assert_eq!(made["spec"]["updateStrategy"], Value::Null, "no updateStrategy, no default inside it");
    let made = api
        .create(
            POOLS,
            json!({"metadata": {"name": "one"}, "spec": {"sandboxTemplateRef": {"name": "nothing"}}}),
        )
        .await;
    assert_eq!(made["spec"]["replicas"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_gets_a_ready_sandbox_with_a_real_pod_to_exec_into() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(TEMPLATES, template("plain", sleeper())).await;
    api.create(POOLS, pool("cold-only", "plain", 0)).await;
    api.create(CLAIMS, claim("mine", "cold-only")).await;
    let claim = api.until_claim_ready("mine").await;
    // Cold: the Sandbox is named like the claim and owned by it.
    assert_eq!(claim["status"]["sandbox"]["name"], "mine", "{claim:#}");
    assert_eq!(condition(&claim, "Ready")["reason"], "DependenciesReady");
    let (_, sandbox) = api.get(&format!("{SANDBOXES}/mine")).await;
    assert_eq!(sandbox["metadata"]["ownerReferences"][0]["kind"], "SandboxClaim");
    assert_eq!(sandbox["metadata"]["ownerReferences"][0]["uid"], claim["metadata"]["uid"]);
    assert_eq!(sandbox["metadata"]["labels"]["agents.x-k8s.io/launch-type"], "cold");
    assert_eq!(condition(&sandbox, "Ready")["message"], "Pod is Ready");
    assert_eq!(condition(&sandbox, "Suspended")["reason"], "NotSuspended");
    assert_eq!(condition(&sandbox, "PodScheduled")["status"], "True");
    // Its pod: the Sandbox's name, owned by it, selected by status.selector, the template's label.
    let (_, pod) = api.get(&format!("{PODS}/mine")).await;
    assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], sandbox["metadata"]["uid"]);
    assert_eq!(pod["metadata"]["labels"]["app"], "plain");
    let selector = sandbox["status"]["selector"].as_str().unwrap();
    let (label, value) = selector.split_once('=').unwrap();
    assert_eq!(label, "agents.x-k8s.io/sandbox-name-hash");
    assert_eq!(pod["metadata"]["labels"][label], value);
    assert_eq!(sandbox["status"]["podIPs"], json!([pod["status"]["podIP"]]));
    assert_eq!(claim["status"]["sandbox"]["podIPs"], sandbox["status"]["podIPs"]);
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    // A real container behind it.
    let (stdout, status) = api.exec("mine", &["sh", "-c", "echo hello from $(hostname)"]).await;
    assert_eq!(stdout, "hello from mine\n");
    assert_eq!(status["status"], "Success");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_pool_hands_out_a_ready_sandbox_and_refills() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(TEMPLATES, template("plain", sleeper())).await;
    api.create(POOLS, pool("warm", "plain", 2)).await;
    api.create(POOLS, pool("cold", "plain", 0)).await;
    let (_, warm) = api
        .until(&format!("{POOLS}/warm"), Duration::from_secs(60), |_, p| p["status"]["readyReplicas"] == 2)
        .await;
    assert_eq!(warm["status"]["readyReplicas"], 2, "{warm:#}");
    let (_, members) = api
        .get(&format!(
            "{SANDBOXES}?labelSelector={}",
            urlencode(warm["status"]["selector"].as_str().unwrap())
        ))
        .await;
    let member_names: Vec<String> = members["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(member_names.len(), 2);
    assert!(member_names.iter().all(|n| n.starts_with("warm-")), "{member_names:?}");

    let started = Instant::now();
    api.create(CLAIMS, claim("fast", "warm")).await;
    let fast = api.until_claim_ready("fast").await;
    let warm_time = started.elapsed();
    let started = Instant::now();
    api.create(CLAIMS, claim("slow", "cold")).await;
    let slow = api.until_claim_ready("slow").await;
    let cold_time = started.elapsed();
    eprintln!("claim ready: from the warm pool in {warm_time:?}, cold in {cold_time:?}");

    // The warm claim got one of the pool's Sandboxes: handed over, no longer the pool's.
    let adopted = fast["status"]["sandbox"]["name"].as_str().unwrap().to_owned();
    assert!(member_names.contains(&adopted), "{adopted} not in {member_names:?}");
    assert_eq!(fast["metadata"]["annotations"]["agents.x-k8s.io/sandbox-name"], adopted.as_str());
    assert_eq!(slow["status"]["sandbox"]["name"], "slow");
    let (_, sandbox) = api.get(&format!("{SANDBOXES}/{adopted}")).await;
    assert_eq!(
        sandbox["metadata"]["ownerReferences"],
        json!([{
            "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim", "name": "fast",
            "uid": fast["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true,
        }])
    );
    assert_eq!(sandbox["metadata"]["labels"]["agents.x-k8s.io/launch-type"], "warm");
    assert_eq!(sandbox["metadata"]["labels"]["agents.x-k8s.io/claim-uid"], fast["metadata"]["uid"]);
    assert!(sandbox["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"].is_null(), "{sandbox:#}");
    assert_eq!(sandbox["metadata"]["annotations"]["agents.x-k8s.io/pod-name"], adopted.as_str());
    // Its pod is the one that was already running (no restart), out of the pool's selector.
    let (_, pod) = api
        .until(&format!("{PODS}/{adopted}"), Duration::from_secs(10), |_, p| {
            p["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"].is_null()
        })
        .await;
    assert!(pod["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"].is_null(), "{pod:#}");
    // The template's system-prefixed labels never reach a pod (the real controller filters them):
    // the claim's uid is on the Sandbox and its pod template, not on the pod.
    assert!(pod["metadata"]["labels"]["agents.x-k8s.io/claim-uid"].is_null(), "{pod:#}");
    assert_eq!(
        sandbox["spec"]["podTemplate"]["metadata"]["labels"]["agents.x-k8s.io/claim-uid"],
        fast["metadata"]["uid"]
    );
    let (stdout, _) = api.exec(&adopted, &["hostname"]).await;
    assert_eq!(stdout.trim(), adopted);
    // The pool makes a new member in its place.
    let (_, warm) = api
        .until(&format!("{POOLS}/warm"), Duration::from_secs(60), |_, p| p["status"]["readyReplicas"] == 2)
        .await;
    assert_eq!(warm["status"]["readyReplicas"], 2, "{warm:#}");
    let (_, members) = api
        .get(&format!(
            "{SANDBOXES}?labelSelector={}",
            urlencode(warm["status"]["selector"].as_str().unwrap())
        ))
        .await;
    let now: Vec<&str> =
        members["items"].as_array().unwrap().iter().filter_map(|s| s["metadata"]["name"].as_str()).collect();
    assert!(!now.contains(&adopted.as_str()) && now.len() == 2, "{now:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suspend_deletes_the_pod_and_resume_makes_a_new_one() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(TEMPLATES, template("plain", sleeper())).await;
    api.create(POOLS, pool("cold-only", "plain", 0)).await;
    api.create(CLAIMS, claim("napper", "cold-only")).await;
    api.until_claim_ready("napper").await;
    let (_, first) = api.get(&format!("{PODS}/napper")).await;
    let (_, status) = api.exec("napper", &["sh", "-c", "echo kept > /tmp/mark"]).await;
    assert_eq!(status["status"], "Success");

    api.merge_patch(&format!("{SANDBOXES}/napper"), json!({"spec": {"operatingMode": "Suspended"}})).await;
    let (status, _) = api.until(&format!("{PODS}/napper"), Duration::from_secs(30), |s, _| s == 404).await;
    assert_eq!(status, 404, "the pod is deleted on suspend");
    let (_, sandbox) = api
        .until(&format!("{SANDBOXES}/napper"), Duration::from_secs(10), |_, s| {
            condition(s, "Suspended")["status"] == "True"
        })
        .await;
    assert_eq!(condition(&sandbox, "Suspended")["reason"], "PodTerminated", "{sandbox:#}");
    assert_eq!(
        (ready(&sandbox), &condition(&sandbox, "Ready")["reason"]),
        ("False", &json!("SandboxSuspended"))
    );
    assert_eq!(condition(&sandbox, "Ready")["message"], "Sandbox is suspended");
    assert!(sandbox["status"]["podIPs"].is_null(), "{sandbox:#}");
    let (_, claim) = api
        .until(&format!("{CLAIMS}/napper"), Duration::from_secs(10), |_, c| {
            condition(c, "Ready")["reason"] == "SandboxSuspended"
        })
        .await;
    assert_eq!(ready(&claim), "False", "{claim:#}");
    assert!(containers_of(&api.fake).is_empty(), "the suspended pod's container is gone");

    api.merge_patch(&format!("{SANDBOXES}/napper"), json!({"spec": {"operatingMode": "Running"}})).await;
    api.until_claim_ready("napper").await;
    let (_, second) = api.get(&format!("{PODS}/napper")).await;
    assert_ne!(second["metadata"]["uid"], first["metadata"]["uid"], "a new pod");
    // As in the real controller, the pod (and its filesystem) was deleted: the mark is gone.
    let (_, status) = api.exec("napper", &["test", "-e", "/tmp/mark"]).await;
    assert_eq!(status["reason"], "NonZeroExitCode", "{status}");
    let (_, sandbox) = api.get(&format!("{SANDBOXES}/napper")).await;
    assert_eq!(condition(&sandbox, "Suspended")["reason"], "NotSuspended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_claim_takes_its_sandbox_pod_and_container() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(TEMPLATES, template("plain", sleeper())).await;
    api.create(POOLS, pool("cold-only", "plain", 0)).await;
    api.create(CLAIMS, claim("short-lived", "cold-only")).await;
    api.until_claim_ready("short-lived").await;
    assert_eq!(containers_of(&api.fake).len(), 1);
    api.delete(&format!("{CLAIMS}/short-lived")).await;
    let (status, _) = api.get(&format!("{SANDBOXES}/short-lived")).await;
    assert_eq!(status, 404, "the Sandbox goes with its claim");
    let (status, _) =
        api.until(&format!("{PODS}/short-lived"), Duration::from_secs(30), |s, _| s == 404).await;
    assert_eq!(status, 404, "the pod goes with its Sandbox");
    assert!(agentd_tests::eventually(Duration::from_secs(10), || containers_of(&api.fake).is_empty()).await);
    // A Sandbox deleted on its own takes its pod too.
    api.create(
        SANDBOXES,
        json!({"metadata": {"name": "loose"}, "spec": {"podTemplate": {"spec": sleeper()}}}),
    )
    .await;
    let (_, sandbox) =
        api.until(&format!("{SANDBOXES}/loose"), Duration::from_secs(60), |_, s| ready(s) == "True").await;
    assert_eq!(ready(&sandbox), "True", "{sandbox:#}");
    api.delete(&format!("{SANDBOXES}/loose")).await;
    let (status, _) = api.until(&format!("{PODS}/loose"), Duration::from_secs(30), |s, _| s == 404).await;
    assert_eq!(status, 404);
}

/// RFC 3339 for `seconds` from now (the API's form, whole seconds).
fn in_seconds(seconds: u64) -> String {
    agentd_fakes::fake_kube::store::rfc3339(std::time::SystemTime::now() + Duration::from_secs(seconds))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_times_expire_claims_and_sandboxes() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(TEMPLATES, template("plain", sleeper())).await;
    api.create(POOLS, pool("cold-only", "plain", 0)).await;
    // Policy Delete (what the Python client's shutdown_after_seconds asks for): the claim goes,
    // and its Sandbox and pod with it.
    let mut doomed = claim("doomed", "cold-only");
    doomed["spec"]["lifecycle"] = json!({"shutdownTime": in_seconds(3), "shutdownPolicy": "Delete"});
    api.create(CLAIMS, doomed).await;
    // Policy Retain (the default): the Sandbox goes, the claim stays and says so.
    let mut kept = claim("kept", "cold-only");
    kept["spec"]["lifecycle"] = json!({"shutdownTime": in_seconds(3)});
    api.create(CLAIMS, kept).await;
    // A Sandbox's own shutdownTime (Retain): its pod goes, it stays, expired.
    api.create(
        SANDBOXES,
        json!({"metadata": {"name": "timed"}, "spec": {"podTemplate": {"spec": sleeper()}, "shutdownTime": in_seconds(3)}}),
    )
    .await;
    api.until_claim_ready("doomed").await;
    api.until_claim_ready("kept").await;

    let (status, _) = api.until(&format!("{CLAIMS}/doomed"), Duration::from_secs(20), |s, _| s == 404).await;
    assert_eq!(status, 404, "an expired claim with policy Delete is deleted");
    let (status, _) = api.until(&format!("{PODS}/doomed"), Duration::from_secs(20), |s, _| s == 404).await;
    assert_eq!(status, 404);

    let (_, kept) = api
        .until(&format!("{CLAIMS}/kept"), Duration::from_secs(20), |_, c| {
            condition(c, "Ready")["reason"] == "ClaimExpired"
        })
        .await;
    assert_eq!(condition(&kept, "Ready")["message"], "Claim expired. Sandbox cleanup initiated.", "{kept:#}");
    assert!(kept["status"]["sandbox"].is_null(), "{kept:#}");
    let (status, _) = api.until(&format!("{SANDBOXES}/kept"), Duration::from_secs(20), |s, _| s == 404).await;
    assert_eq!(status, 404, "a retained expired claim loses its Sandbox");

    let (_, timed) = api
        .until(&format!("{SANDBOXES}/timed"), Duration::from_secs(20), |_, s| {
            condition(s, "Ready")["reason"] == "SandboxExpired"
        })
        .await;
    assert_eq!(condition(&timed, "Ready")["message"], "Sandbox has expired", "{timed:#}");
    let (status, _) = api.until(&format!("{PODS}/timed"), Duration::from_secs(20), |s, _| s == 404).await;
    assert_eq!(status, 404, "an expired Sandbox loses its pod");
    let (_, timed) = api.get(&format!("{SANDBOXES}/timed")).await;
    assert!(timed["status"]["podIPs"].is_null() && timed["status"]["selector"].is_null(), "{timed:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_on_a_missing_pool_or_template_says_why_and_recovers() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    api.create(CLAIMS, claim("lost", "no-such-pool")).await;
    let (_, lost) = api
        .until(&format!("{CLAIMS}/lost"), Duration::from_secs(10), |_, c| !condition(c, "Ready").is_null())
        .await;
    let why = condition(&lost, "Ready");
    assert_eq!((&why["status"], &why["reason"]), (&json!("False"), &json!("WarmPoolNotFound")), "{lost:#}");
    assert_eq!(why["message"], "SandboxWarmPool \"no-such-pool\" not found");

    api.create(POOLS, pool("orphan", "no-such-template", 0)).await;
    api.create(CLAIMS, claim("stray", "orphan")).await;
    let (_, stray) = api
        .until(&format!("{CLAIMS}/stray"), Duration::from_secs(10), |_, c| !condition(c, "Ready").is_null())
        .await;
    let why = condition(&stray, "Ready");
    assert_eq!((&why["status"], &why["reason"]), (&json!("False"), &json!("TemplateNotFound")), "{stray:#}");
    assert_eq!(why["message"], "SandboxTemplate \"no-such-template\" not found");
    // Once the template exists the claim gets its Sandbox.
    api.create(TEMPLATES, template("no-such-template", sleeper())).await;
    let stray = api.until_claim_ready("stray").await;
    assert_eq!(stray["status"]["sandbox"]["name"], "stray");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_cannot_run_shows_in_the_sandbox_conditions() {
    if !docker_available(IMAGE).await {
        return;
    }
    let api = Api::start();
    let mut nowhere = sleeper();
    nowhere["nodeSelector"] = json!({"kubernetes.io/hostname": "elsewhere"});
    api.create(
        SANDBOXES,
        json!({"metadata": {"name": "nowhere"}, "spec": {"podTemplate": {"spec": nowhere}}}),
    )
    .await;
    let (_, sandbox) = api
        .until(&format!("{SANDBOXES}/nowhere"), Duration::from_secs(20), |_, s| {
            condition(s, "PodScheduled")["status"] == "False"
        })
        .await;
    // As the real controller: the scheduler's condition mirrored, Ready waiting on the pod.
    let scheduled = condition(&sandbox, "PodScheduled");
    assert_eq!(scheduled["reason"], "Unschedulable", "{sandbox:#}");
    assert!(scheduled["message"].as_str().unwrap().starts_with("0/1 nodes are available"), "{scheduled}");
    let why = condition(&sandbox, "Ready");
    assert_eq!(
        (&why["status"], &why["reason"], &why["message"]),
        (&json!("False"), &json!("DependenciesNotReady"), &json!("Pod exists with phase: Pending"))
    );
    let mut missing = sleeper();
    missing["containers"][0]["image"] = json!("agentd-no-such-image:latest");
    missing["containers"][0]["imagePullPolicy"] = json!("Never");
    api.create(
        SANDBOXES,
        json!({"metadata": {"name": "imageless"}, "spec": {"podTemplate": {"spec": missing}}}),
    )
    .await;
    let (_, pod) = api
        .until(&format!("{PODS}/imageless"), Duration::from_secs(20), |_, p| {
            p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
        })
        .await;
    assert_eq!(
        pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"], "ErrImageNeverPull",
        "{pod:#}"
    );
    let (_, sandbox) = api.get(&format!("{SANDBOXES}/imageless")).await;
    assert_eq!(condition(&sandbox, "Ready")["message"], "Pod exists with phase: Pending", "{sandbox:#}");
    // A pod the API server refuses: the Sandbox says why, as the real controller does.
    let imageless = json!({"containers": [{"name": "main"}]});
    api.create(
        SANDBOXES,
        json!({"metadata": {"name": "refused"}, "spec": {"podTemplate": {"spec": imageless}}}),
    )
    .await;
    let (_, sandbox) = api
        .until(&format!("{SANDBOXES}/refused"), Duration::from_secs(10), |_, s| {
            !condition(s, "Ready").is_null()
        })
        .await;
    let why = condition(&sandbox, "Ready");
    assert_eq!((&why["status"], &why["reason"]), (&json!("False"), &json!("ReconcilerError")), "{sandbox:#}");
    assert_eq!(
        why["message"],
        "Error seen: Pod \"refused\" is invalid: spec.containers[0].image: Required value"
    );
    // A pod that ends: Finished, and Ready False for good (clients treat it as terminal), on the
    // claim too.
    let ends = json!({"containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c", "exit 3"]}], "restartPolicy": "Never"});
    api.create(TEMPLATES, template("ends", ends)).await;
    api.create(POOLS, pool("ends", "ends", 0)).await;
    api.create(CLAIMS, claim("brief", "ends")).await;
    let (_, claim) = api
        .until(&format!("{CLAIMS}/brief"), Duration::from_secs(30), |_, c| {
            condition(c, "Finished")["status"] == "True"
        })
        .await;
    assert_eq!(condition(&claim, "Finished")["reason"], "PodFailed", "{claim:#}");
    assert_eq!((ready(&claim), &condition(&claim, "Ready")["reason"]), ("False", &json!("PodFailed")));
    let (_, sandbox) = api.get(&format!("{SANDBOXES}/brief")).await;
    assert_eq!(condition(&sandbox, "Finished")["message"], "Pod failed", "{sandbox:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_claims_runs_and_deletes() {
    if !docker_available(IMAGE).await {
        return;
    }
    let Some(python) = std::env::var_os("AGENTD_KUBE_PYTHON") else {
        skip(
            agentd_tests::Need::KubeSdk,
            "AGENTD_KUBE_PYTHON is not set (.ci/run installs the clients in a venv)",
        );
        return;
    };
    let api = Api::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("agent_sandbox_check.py");
    let cwd = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(python);
    command
        .arg(&script)
        .arg(IMAGE)
        .current_dir(cwd.path())
        .env("KUBECONFIG", api.fake.kubeconfig_path())
        .env_remove("KUBERNETES_SERVICE_HOST")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(240), command.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("client script stderr:\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "the client script failed:\n{stdout}");
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        got,
        [
            "check pool-ready 1",
            "check status SandboxReady",
            "check warm True",
            "check pod-name True",
            "check run 3 'hello\\n' 'oops\\n'",
            "check listed True",
            "check missing-pool SandboxWarmPoolNotFoundError",
            "check missing-template SandboxTemplateNotFoundError",
            "check deleted True",
            "check claims-left []",
            "done",
        ]
    );
    let requests = api.fake.requests();
    assert!(
        requests.iter().any(|r| r
            .starts_with("POST /apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims")),
        "{requests:?}"
    );
    assert!(requests.iter().any(|r| r.contains("sandboxclaims?") && r.contains("watch=")), "{requests:?}");
}
