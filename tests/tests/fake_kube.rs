//! The fake Kubernetes API server (`agentd_fakes::fake_kube`) checked over HTTP and websockets
//! against the API's documented behaviour: auth, discovery, the generic verbs and their `Status`
//! errors, selectors, watches, Pods as real containers, exec on the channel protocols.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_kube::{CONTAINER_LABEL, FakeKube};
use agentd_tests::docker_available;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::{self, Message};

const IMAGE: &str = "agentd-base-debian:latest";

struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    fn new(fake: &FakeKube) -> Self {
        Self { http: reqwest::Client::new(), base: fake.url(), token: fake.token().to_owned() }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn delete(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::DELETE, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn patch(&self, path: &str, content_type: &str, body: Value) -> (u16, Value) {
        let response = self
            .http
            .patch(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", content_type)
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.json().await.unwrap())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_discovery_and_the_generic_verbs_follow_the_api() {
    let fake = FakeKube::start();
    let api = Api::new(&fake);
    // No token or a wrong one on the API: 401 with the Status body.
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    let response =
        api.http.get(format!("{}/api/v1/namespaces/default/pods", fake.url())).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(response.json::<Value>().await.unwrap(), unauthorized);
    let response =
        api.http.get(format!("{}/api/v1/pods", fake.url())).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);

    // Discovery.
    let (status, version) = api.get("/version").await;
    assert_eq!((status, version["major"].as_str()), (200, Some("1")));
    let (_, versions) = api.get("/api").await;
    assert_eq!(
        (versions["kind"].as_str(), versions["versions"].clone()),
        (Some("APIVersions"), json!(["v1"]))
    );
    let (_, resources) = api.get("/api/v1").await;
    assert_eq!(resources["kind"], "APIResourceList");
    let names: Vec<&str> =
        resources["resources"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    for name in ["pods", "pods/exec", "pods/log", "pods/status", "namespaces", "nodes"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    let pods = resources["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
    assert_eq!((pods["kind"].as_str(), pods["namespaced"].as_bool()), (Some("Pod"), Some(true)));
    let (_, groups) = api.get("/apis").await;
    assert_eq!(groups["kind"], "APIGroupList");

    // A custom resource type registered from Rust shows in discovery and gets the verbs.
    let widget =
        agentd_fakes::fake_kube::ResourceType::new("example.dev", "v1alpha1", "widgets", "Widget", true)
            .with_status();
    fake.store().register(widget);
    let (_, groups) = api.get("/apis").await;
    assert_eq!(
        groups["groups"],
        json!([{"name": "example.dev", "versions": [{"groupVersion": "example.dev/v1alpha1", "version": "v1alpha1"}],
            "preferredVersion": {"groupVersion": "example.dev/v1alpha1", "version": "v1alpha1"}}])
    );
    let (status, list) = api.get("/apis/example.dev/v1alpha1").await;
    assert_eq!(status, 200);
    assert_eq!(list["resources"][0]["name"], "widgets");
    assert_eq!(list["resources"][1]["name"], "widgets/status");

    let base = "/apis/example.dev/v1alpha1/namespaces/default/widgets";
    let (status, created) =
        api.post(base, json!({"metadata": {"name": "w1", "labels": {"app": "a", "tier": "x"}}, "spec": {"n": 1}, "status": {"s": 1}})).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["apiVersion"], "example.dev/v1alpha1");
    assert_eq!(created["kind"], "Widget");
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        assert!(created["metadata"][field].is_string(), "{field}: {created}");
    }
    assert!(created.get("status").is_none(), "status is dropped on create: {created}");
    let (status, again) = api.post(base, json!({"metadata": {"name": "w1"}})).await;
    assert_eq!(status, 409);
    assert_eq!(
        again,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "widgets.example.dev \"w1\" already exists", "reason": "AlreadyExists",
            "details": {"name": "w1", "group": "example.dev", "kind": "widgets"}, "code": 409})
    );
    let (status, generated) =
        api.post(base, json!({"metadata": {"generateName": "w-", "labels": {"app": "b"}}})).await;
    assert_eq!(status, 201);
    let generated_name = generated["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(generated_name.starts_with("w-") && generated_name.len() == 7, "{generated_name}");
    let (status, invalid) = api.post(base, json!({"metadata": {"name": "Bad_Name"}})).await;
    assert_eq!((status, invalid["reason"].as_str()), (422, Some("Invalid")), "{invalid}");
    assert!(invalid["message"].as_str().unwrap().starts_with("Widget.example.dev \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"), "{invalid}");
    assert_eq!(invalid["details"]["causes"][0]["field"], "metadata.name");
    let (status, unnamed) = api.post(base, json!({"metadata": {}})).await;
    assert_eq!(status, 422);
    assert_eq!(unnamed["details"]["causes"][0]["reason"], "FieldValueRequired");

    let (status, missing) = api.get(&format!("{base}/nope")).await;
    assert_eq!(status, 404);
    assert_eq!(missing["message"], "widgets.example.dev \"nope\" not found");
    let (status, missing) = api.get("/api/v1/namespaces/default/pods/nope").await;
    assert_eq!(
        (status, missing),
        (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "pods \"nope\" not found", "reason": "NotFound",
            "details": {"name": "nope", "kind": "pods"}, "code": 404})
        )
    );
    let (status, no_ns) = api
        .post(
            "/api/v1/namespaces/nowhere/pods",
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .await;
    assert_eq!((status, no_ns["message"].as_str()), (404, Some("namespaces \"nowhere\" not found")));
    let (status, ns) = api.get("/api/v1/namespaces/default").await;
    assert_eq!((status, ns["status"]["phase"].as_str()), (200, Some("Active")));

    // Lists with selectors.
    let list_names = |list: &Value| -> Vec<String> {
        list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["metadata"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    for (selector, want) in [
        ("app=a", vec!["w1"]),
        ("app==a", vec!["w1"]),
        ("app!=a", vec![generated_name.as_str()]),
        ("tier", vec!["w1"]),
        ("!tier", vec![generated_name.as_str()]),
        ("app in (a,b)", vec![generated_name.as_str(), "w1"]),
        ("app notin (a)", vec![generated_name.as_str()]),
    ] {
        let (status, list) = api.get(&format!("{base}?labelSelector={}", urlencode(selector))).await;
        assert_eq!(status, 200);
        let mut got = list_names(&list);
        got.sort();
        let mut want: Vec<String> = want.into_iter().map(str::to_owned).collect();
        want.sort();
        assert_eq!(got, want, "{selector}");
        assert_eq!(list["kind"], "WidgetList");
        assert!(list["metadata"]["resourceVersion"].is_string());
    }
    let (_, list) = api.get(&format!("{base}?fieldSelector=metadata.name%3Dw1")).await;
    assert_eq!(list_names(&list), ["w1"]);

    // Replace with a stale resourceVersion: 409 Conflict; merge patch; status subresource.
    let mut stale = created.clone();
    stale["spec"]["n"] = json!(2);
    let (status, updated) = api.call(reqwest::Method::PUT, &format!("{base}/w1"), Some(stale.clone())).await;
    assert_eq!(status, 200, "{updated}");
    assert_eq!(updated["metadata"]["generation"], 2);
    let (status, conflict) = api.call(reqwest::Method::PUT, &format!("{base}/w1"), Some(stale)).await;
    assert_eq!((status, conflict["reason"].as_str()), (409, Some("Conflict")));
    assert_eq!(
        conflict["message"],
        "Operation cannot be fulfilled on widgets.example.dev \"w1\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let (status, patched) = api
        .patch(
            &format!("{base}/w1"),
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"tier": null, "new": "y"}}, "spec": {"m": 3}}),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"], json!({"app": "a", "new": "y"}));
    assert_eq!(patched["spec"], json!({"n": 2, "m": 3}));
    let (status, with_status) = api
        .patch(
            &format!("{base}/w1/status"),
            "application/strategic-merge-patch+json",
            json!({"status": {"ready": true}, "spec": {"n": 99}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        (with_status["status"].clone(), with_status["spec"]["n"].clone()),
        (json!({"ready": true}), json!(2))
    );
    let (status, _) = api.patch(&format!("{base}/w1"), "application/json-patch+json", json!([])).await;
    assert_eq!(status, 415);

    // Watch from a resourceVersion: only what came after; without: ADDED for what is there.
    let from = with_status["metadata"]["resourceVersion"].as_str().unwrap().to_owned();
    let watch = tokio::spawn({
        let (http, url, token) = (
            api.http.clone(),
            format!("{}{base}?watch=true&resourceVersion={from}&timeoutSeconds=2", fake.url()),
            api.token.clone(),
        );
        async move { http.get(url).bearer_auth(token).send().await.unwrap().text().await.unwrap() }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.patch(&format!("{base}/w1"), "application/merge-patch+json", json!({"spec": {"n": 5}})).await;
    let (status, deleted) = api.call(reqwest::Method::DELETE, &format!("{base}/w1"), None).await;
    assert_eq!((status, deleted["metadata"]["name"].as_str()), (200, Some("w1")));
    let events: Vec<Value> = watch.await.unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<(&str, &str)> = events
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("MODIFIED", "w1"), ("DELETED", "w1")]);
    let response = api
        .http
        .get(format!("{}{base}?watch=1&timeoutSeconds=1", fake.url()))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.text().await.unwrap();
    let initial: Vec<Value> = body.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(initial.len(), 1);
    assert_eq!(
        (initial[0]["type"].as_str(), initial[0]["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some(generated_name.as_str()))
    );

    // Finalizers hold a deletion until they are cleared; ownerReferences cascade (the garbage
    // collector's background propagation).
    let (_, held) =
        api.post(base, json!({"metadata": {"name": "held", "finalizers": ["example.dev/hold"]}})).await;
    let owner_ref = json!([{"apiVersion": "example.dev/v1alpha1", "kind": "Widget", "name": "held",
        "uid": held["metadata"]["uid"], "controller": true}]);
    let (status, _) =
        api.post(base, json!({"metadata": {"name": "child", "ownerReferences": owner_ref}})).await;
    assert_eq!(status, 201);
    let (status, deleting) = api.delete(&format!("{base}/held")).await;
    assert_eq!(status, 200);
    assert!(deleting["metadata"]["deletionTimestamp"].is_string(), "{deleting}");
    assert_eq!(api.get(&format!("{base}/held")).await.0, 200, "a finalizer holds it");
    assert_eq!(api.get(&format!("{base}/child")).await.0, 200);
    let (status, _) = api
        .patch(
            &format!("{base}/held"),
            "application/merge-patch+json",
            json!({"metadata": {"finalizers": null}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(api.get(&format!("{base}/held")).await.0, 404);
    assert_eq!(api.get(&format!("{base}/child")).await.0, 404, "the dependent outlived its owner");
}

/// An exec query: `command=` for each word, then `rest` (`container=…&stdout=true…`).
fn exec_query(command: &[&str], rest: &str) -> String {
    let words: Vec<String> = command.iter().map(|w| format!("command={}", urlencode(w))).collect();
    format!("{}&{rest}", words.join("&"))
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// Waits (through a watch, as a controller would) until `pod` satisfies `check`; the Pod then.
async fn wait_pod(api: &Api, pod: &str, within: Duration, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + within;
    let mut last = Value::Null;
    while Instant::now() < deadline {
        let url = format!(
            "{}/api/v1/namespaces/default/pods?watch=true&fieldSelector=metadata.name%3D{pod}&timeoutSeconds=5",
            api.base
        );
        let mut response = api.http.get(url).bearer_auth(&api.token).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let mut buffer = Vec::new();
        while let Ok(Some(chunk)) = response.chunk().await {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line).unwrap();
                last = event["object"].clone();
                if check(&last) {
                    return last;
                }
            }
        }
    }
    panic!("pod {pod} did not get there in {within:?}; last seen: {last:#}");
}

fn condition<'a>(pod: &'a Value, kind: &str) -> &'a Value {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn ready(pod: &Value) -> bool {
    condition(pod, "Ready")["status"] == "True"
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Opens `pods/{pod}/exec?{query}` offering `protocols`; the socket and the protocol chosen.
async fn exec_ws(
    fake: &FakeKube,
    pod: &str,
    query: &str,
    protocols: &str,
) -> Result<(Ws, String), tungstenite::Error> {
    let url =
        format!("{}/api/v1/namespaces/default/pods/{pod}/exec?{query}", fake.url().replace("http", "ws"));
    let mut request = url.into_client_request().unwrap();
    let headers = request.headers_mut();
    headers.insert("authorization", HeaderValue::from_str(&format!("Bearer {}", fake.token())).unwrap());
    headers.insert("sec-websocket-protocol", HeaderValue::from_str(protocols).unwrap());
    let (ws, response) = tokio_tungstenite::connect_async(request).await?;
    let chosen = response
        .headers()
        .get("sec-websocket-protocol")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    Ok((ws, chosen))
}

/// What one exec said: its frames' contents per channel, in order, and how it ended.
#[derive(Debug, Default)]
struct Outcome {
    first: Option<Vec<u8>>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    error: Vec<u8>,
    closed_with_frame: bool,
}

impl Outcome {
    fn status(&self) -> Value {
        serde_json::from_slice(&self.error).unwrap_or(Value::Null)
    }
}

async fn collect(ws: &mut Ws) -> Outcome {
    let mut outcome = Outcome::default();
    while let Some(message) =
        tokio::time::timeout(Duration::from_secs(60), ws.next()).await.expect("exec ends in time")
    {
        match message {
            Ok(Message::Binary(data)) => {
                if outcome.first.is_none() {
                    outcome.first = Some(data.to_vec());
                }
                match data[0] {
                    1 => outcome.stdout.extend_from_slice(&data[1..]),
                    2 => outcome.stderr.extend_from_slice(&data[1..]),
                    3 => outcome.error.extend_from_slice(&data[1..]),
                    other => panic!("frame on channel {other}"),
                }
            }
            Ok(Message::Close(_)) => {
                outcome.closed_with_frame = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    outcome
}

/// A Pod of two containers sharing an `emptyDir` that an init container filled, and one network:
/// `web` serves the volume over HTTP on 8080, `main` sleeps.
fn two_container_pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "fake-kube-test"}},
        "spec": {
            "restartPolicy": "Never",
            "volumes": [{"name": "shared", "emptyDir": {}}],
            "initContainers": [{
                "name": "init", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sh", "-c", "echo from-init > /shared/hello; echo init-log"],
                "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
            }],
            "containers": [
                {
                    "name": "web", "image": IMAGE, "imagePullPolicy": "Never",
                    "command": ["python3", "-m", "http.server", "8080", "--directory", "/shared"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                },
                {
                    "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                    "command": ["sh", "-c"], "args": ["echo started $GREETING; exec sleep infinity"],
                    "env": [{"name": "GREETING", "value": "hi"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "workingDir": "/shared",
                    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
                },
            ],
        },
    })
}

/// Live containers of a fake (any state).
fn containers_of(fake: &FakeKube) -> Vec<String> {
    agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}={}", fake.instance()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_are_containers_with_the_kubelets_status_exec_and_log() {
    if !docker_available(IMAGE).await {
        return;
    }
    let fake = FakeKube::start();
    let api = Api::new(&fake);
    let (status, created) = api.post("/api/v1/namespaces/default/pods", two_container_pod("duo")).await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["status"]["phase"], "Pending");
    assert_eq!(created["spec"]["containers"][0]["terminationMessagePath"], "/dev/termination-log");
    let pod = wait_pod(&api, "duo", Duration::from_secs(60), ready).await;
    assert_eq!(pod["status"]["phase"], "Running", "{pod:#}");
    assert_eq!(pod["spec"]["nodeName"], "fake-kube");
    for kind in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(condition(&pod, kind)["status"], "True", "{kind}: {pod:#}");
        assert!(condition(&pod, kind)["lastTransitionTime"].is_string(), "{kind}: {pod:#}");
    }
    let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 2);
    for status in statuses {
        assert_eq!(
            (status["ready"].as_bool(), status["started"].as_bool()),
            (Some(true), Some(true)),
            "{status}"
        );
        assert!(status["state"]["running"]["startedAt"].is_string(), "{status}");
        assert!(status["containerID"].as_str().unwrap().starts_with("docker://"), "{status}");
        assert!(status["imageID"].as_str().unwrap().starts_with("sha256:"), "{status}");
        assert_eq!(status["image"], IMAGE);
    }
    let init = &pod["status"]["initContainerStatuses"][0];
    assert_eq!(
        (init["state"]["terminated"]["exitCode"].as_i64(), init["state"]["terminated"]["reason"].as_str()),
        (Some(0), Some("Completed")),
        "{init}"
    );
    // The pod IP is the containers' bridge address, reachable from the host; the volume holds
    // what the init container wrote.
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
    assert!(pod["status"]["hostIP"].is_string(), "{pod:#}");
    let mut body = String::new();
    for _ in 0..50 {
        if let Ok(response) = reqwest::get(format!("http://{pod_ip}:8080/hello")).await {
            body = response.text().await.unwrap();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(body, "from-init\n");

    // Exec on v5: the empty first frame, stdin then the close signal, stdout and stderr apart, the
    // exit code in the Status, then a close frame. `main` shares `web`'s network.
    let script = "cat; echo $POD $(pwd) >&2; \
        python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8080/hello').read().decode().strip())\"; \
        exit 3";
    let query = exec_query(&["sh", "-c", script], "container=main&stdin=true&stdout=true&stderr=true");
    let (mut ws, protocol) =
        exec_ws(&fake, "duo", &query, "v5.channel.k8s.io, v4.channel.k8s.io, channel.k8s.io").await.unwrap();
    assert_eq!(protocol, "v5.channel.k8s.io");
    ws.send(Message::binary(b"\x00hello stdin\n".to_vec())).await.unwrap();
    ws.send(Message::binary(vec![255, 0])).await.unwrap();
    let outcome = collect(&mut ws).await;
    assert_eq!(outcome.first.as_deref(), Some(&[1u8][..]), "the first frame is an empty stdout frame");
    assert_eq!(String::from_utf8_lossy(&outcome.stdout), "hello stdin\nfrom-init\n");
    assert_eq!(String::from_utf8_lossy(&outcome.stderr), "duo /shared\n");
    let status = outcome.status();
    assert_eq!(status["status"], "Failure", "{status}");
    assert_eq!(status["reason"], "NonZeroExitCode");
    assert_eq!(status["details"]["causes"], json!([{"reason": "ExitCode", "message": "3"}]));
    assert!(outcome.closed_with_frame);

    // v4 (what the Python client offers): success is a bare Success status.
    let (mut ws, protocol) = exec_ws(
        &fake,
        "duo",
        &exec_query(&["cat", "/shared/hello"], "container=main&stdout=true&stderr=true"),
        "v4.channel.k8s.io",
    )
    .await
    .unwrap();
    assert_eq!(protocol, "v4.channel.k8s.io");
    let outcome = collect(&mut ws).await;
    assert_eq!(
        (outcome.stdout.as_slice(), outcome.status()),
        (&b"from-init\n"[..], json!({"metadata": {}, "status": "Success"}))
    );
    // channel.k8s.io (v1): the error channel carries text, only on failure.
    let (mut ws, _) = exec_ws(
        &fake,
        "duo",
        &exec_query(&["sh", "-c", "exit 5"], "container=main&stdout=true"),
        "channel.k8s.io",
    )
    .await
    .unwrap();
    let outcome = collect(&mut ws).await;
    assert!(String::from_utf8_lossy(&outcome.error).contains("exit code 5"), "{outcome:?}");
    let (mut ws, _) =
        exec_ws(&fake, "duo", "command=true&container=main&stdout=true", "channel.k8s.io").await.unwrap();
    assert!(collect(&mut ws).await.error.is_empty());

    // Refused before the upgrade, with the apiserver's Status: a missing pod, no container named
    // in a two-container pod.
    let refused = |result: Result<(Ws, String), tungstenite::Error>| match result {
        Err(tungstenite::Error::Http(response)) => (
            response.status().as_u16(),
            serde_json::from_slice::<Value>(response.body().as_deref().unwrap()).unwrap(),
        ),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("upgraded"),
    };
    let (status, body) =
        refused(exec_ws(&fake, "nope", "command=true&stdout=true", "v5.channel.k8s.io").await);
    assert_eq!((status, body["message"].as_str()), (404, Some("pods \"nope\" not found")));
    let (status, body) =
        refused(exec_ws(&fake, "duo", "command=true&stdout=true", "v5.channel.k8s.io").await);
    assert_eq!(
        (status, body["message"].as_str()),
        (400, Some("a container name must be specified for pod duo, choose one of: [web main]"))
    );

    // Backpressure: a command writing 256 MiB while the client reads nothing does not grow the
    // fake's memory (it runs in this process); then every byte arrives.
    let before = agentd_tests::status_kb(std::process::id(), "VmRSS");
    let (mut ws, _) = exec_ws(
        &fake,
        "duo",
        &exec_query(&["head", "-c", "268435456", "/dev/zero"], "container=main&stdout=true"),
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let paused = agentd_tests::status_kb(std::process::id(), "VmRSS");
    let outcome = collect(&mut ws).await;
    assert_eq!(outcome.stdout.len(), 256 << 20);
    assert_eq!(outcome.status()["status"], "Success");
    assert!(
        paused < before + (64 << 10),
        "the fake buffered output: VmRSS {before} kB -> {paused} kB while the client did not read"
    );
    drop(outcome);

    // Dropping the streams: the client sees the connection end without a close frame; the command
    // is not killed: its stdin ends, so it finishes.
    let (mut ws, _) = exec_ws(
        &fake,
        "duo",
        &exec_query(
            &["sh", "-c", "cat > /tmp/got; echo finished > /tmp/done"],
            "container=main&stdin=true&stdout=true",
        ),
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    ws.send(Message::binary(b"\x00partial".to_vec())).await.unwrap();
    let first = ws.next().await.unwrap().unwrap();
    assert_eq!(first, Message::binary(vec![1u8]));
    // Cut once `cat` has the bytes: what a cut loses on its way in is not what this is about.
    let mut got = String::new();
    for _ in 0..100 {
        let query = exec_query(&["cat", "/tmp/got"], "container=main&stdout=true");
        let (mut probe, _) = exec_ws(&fake, "duo", &query, "v5.channel.k8s.io").await.unwrap();
        got = String::from_utf8_lossy(&collect(&mut probe).await.stdout).into_owned();
        if got == "partial" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got, "partial", "the exec's stdin never reached its command");
    assert!(agentd_tests::eventually(Duration::from_secs(5), || fake.exec_streams_open() == 1).await);
    assert_eq!(fake.drop_exec_streams(), 1);
    let outcome = collect(&mut ws).await;
    assert!(!outcome.closed_with_frame && outcome.error.is_empty(), "{outcome:?}");
    let (mut ws, _) = exec_ws(&fake, "duo", &exec_query(&["sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10; do [ -e /tmp/done ] && break; sleep 0.5; done; cat /tmp/got /tmp/done"], "container=main&stdout=true"), "v5.channel.k8s.io").await.unwrap();
    assert_eq!(String::from_utf8_lossy(&collect(&mut ws).await.stdout), "partialfinished\n");

    // Logs: the container's output; the init container's by name.
    let (status, log) = api.get("/api/v1/namespaces/default/pods/duo/log?container=main").await;
    assert_eq!((status, log), (200, json!("started hi\n")));
    let (_, log) = api.get("/api/v1/namespaces/default/pods/duo/log?container=init").await;
    assert_eq!(log, json!("init-log\n"));

    // Delete: the Pod is Terminating, then gone with its containers and volume.
    let uid = pod["metadata"]["uid"].as_str().unwrap().to_owned();
    let (status, deleting) = api.delete("/api/v1/namespaces/default/pods/duo").await;
    assert_eq!(status, 200);
    assert!(deleting["metadata"]["deletionTimestamp"].is_string(), "{deleting}");
    let pod_filter = format!("label={CONTAINER_LABEL}.pod={uid}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _) = api.get("/api/v1/namespaces/default/pods/duo").await;
        if status == 404 && agentd_fakes::containers::listed(&pod_filter).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the pod or its containers stayed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let volumes = std::process::Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &pod_filter])
        .output()
        .unwrap();
    assert!(volumes.stdout.is_empty(), "volumes left: {}", String::from_utf8_lossy(&volumes.stdout));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_run_say_why_as_the_cluster_would() {
    if !docker_available(IMAGE).await {
        return;
    }
    let fake = FakeKube::start();
    let api = Api::new(&fake);
    let pod = |name: &str, container: Value, extra: Value| {
        let mut pod = json!({"metadata": {"name": name}, "spec": {"restartPolicy": "Never", "containers": [container]}});
        if let Value::Object(fields) = extra {
            for (k, v) in fields {
                pod["spec"][k] = v;
            }
        }
        pod
    };
    let sleeper = json!({"name": "c", "image": IMAGE, "command": ["sleep", "infinity"]});
    // No node matches the selector: Pending, PodScheduled False, Unschedulable.
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods",
            pod("picky", sleeper.clone(), json!({"nodeSelector": {"disktype": "ssd"}})),
        )
        .await;
    assert_eq!(status, 201);
    let picky = wait_pod(&api, "picky", Duration::from_secs(20), |p| {
        condition(p, "PodScheduled")["status"] == "False"
    })
    .await;
    let scheduled = condition(&picky, "PodScheduled");
    assert_eq!(
        (scheduled["reason"].as_str(), picky["status"]["phase"].as_str()),
        (Some("Unschedulable"), Some("Pending"))
    );
    assert!(
        scheduled["message"]
            .as_str()
            .unwrap()
            .starts_with("0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."),
        "{scheduled}"
    );
    let (_, exec) = api.get("/api/v1/namespaces/default/pods/picky/exec?command=true&stdout=true").await;
    assert_eq!(exec["message"], "Upgrade request required");
    let refused = exec_ws(&fake, "picky", "command=true&stdout=true", "v5.channel.k8s.io").await;
    match refused {
        Err(tungstenite::Error::Http(response)) => {
            assert_eq!(response.status().as_u16(), 400);
            let body: Value = serde_json::from_slice(response.body().as_deref().unwrap()).unwrap();
            assert_eq!(body["message"], "pod picky does not have a host assigned");
        }
        _ => panic!("exec into an unscheduled pod was not refused"),
    }
    // A selector the node satisfies schedules.
    let (status, _) = api
        .post(
            "/api/v1/namespaces/default/pods",
            pod("linux", sleeper.clone(), json!({"nodeSelector": {"kubernetes.io/os": "linux"}})),
        )
        .await;
    assert_eq!(status, 201);
    wait_pod(&api, "linux", Duration::from_secs(30), ready).await;

    // A missing image with imagePullPolicy Never: waiting ErrImageNeverPull, Pending.
    let missing = json!({"name": "c", "image": "fake-kube-missing:1", "imagePullPolicy": "Never"});
    api.post("/api/v1/namespaces/default/pods", pod("noimage", missing, json!({}))).await;
    let noimage = wait_pod(&api, "noimage", Duration::from_secs(20), |p| {
        p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImageNeverPull"
    })
    .await;
    assert_eq!(noimage["status"]["phase"], "Pending");
    assert_eq!(
        noimage["status"]["containerStatuses"][0]["state"]["waiting"]["message"],
        "Container image \"fake-kube-missing:1\" is not present with pull policy of Never"
    );
    assert_eq!(condition(&noimage, "Ready")["reason"], "ContainersNotReady");

    // Containers that exit: Failed with the exit code, Succeeded when all exit 0.
    let failing = json!({"name": "c", "image": IMAGE, "command": ["sh", "-c", "exit 7"]});
    api.post("/api/v1/namespaces/default/pods", pod("fails", failing, json!({}))).await;
    let fails = wait_pod(&api, "fails", Duration::from_secs(30), |p| p["status"]["phase"] == "Failed").await;
    let terminated = &fails["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(
        (terminated["exitCode"].as_i64(), terminated["reason"].as_str()),
        (Some(7), Some("Error")),
        "{fails:#}"
    );
    let done = json!({"name": "c", "image": IMAGE, "command": ["true"]});
    api.post("/api/v1/namespaces/default/pods", pod("done", done, json!({}))).await;
    let done = wait_pod(&api, "done", Duration::from_secs(30), |p| p["status"]["phase"] == "Succeeded").await;
    assert_eq!(done["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed");
    assert_eq!(condition(&done, "Ready")["reason"], "PodCompleted");
    let refused = exec_ws(&fake, "done", "command=true&stdout=true", "v5.channel.k8s.io").await;
    assert!(
        matches!(&refused, Err(tungstenite::Error::Http(r)) if r.status().as_u16() == 400),
        "{:?}",
        refused.err()
    );

    // Invalid pods: 422 with the field.
    let (status, invalid) = api
        .post(
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": "bad"}, "spec": {"containers": [{"name": "c"}]}}),
        )
        .await;
    assert_eq!(
        (status, invalid["details"]["causes"][0]["field"].as_str()),
        (422, Some("spec.containers[0].image")),
        "{invalid}"
    );

    // Dropping the fake removes every container it made.
    let instance = fake.instance().to_owned();
    assert!(!containers_of(&fake).is_empty());
    drop(fake);
    assert!(agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}={instance}")).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_kube_binary_writes_a_kubeconfig_and_serves_until_killed() {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(agentd_tests::binary("fake-kube"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().unwrap().unwrap();
    let path = line.strip_prefix("export KUBECONFIG=").expect("export line").to_owned();
    let kubeconfig = std::fs::read_to_string(&path).unwrap();
    let field = |key: &str| {
        kubeconfig
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("{key}: ")).map(str::to_owned))
            .unwrap()
    };
    let (server, token) = (field("server"), field("token"));
    assert!(server.starts_with("http://127.0.0.1:"), "{kubeconfig}");
    assert_eq!(field("current-context"), "fake-kube");
    assert_eq!(field("namespace"), "default");
    let http = reqwest::Client::new();
    let listed = http
        .get(format!("{server}/api/v1/namespaces/default/pods"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status().as_u16(), 200);
    assert_eq!(listed.json::<Value>().await.unwrap()["kind"], "PodList");
    let mut pod_filter = None;
    if docker_available(IMAGE).await {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": IMAGE, "command": ["sleep", "infinity"]}]}});
        let created: Value = http
            .post(format!("{server}/api/v1/namespaces/default/pods"))
            .bearer_auth(&token)
            .json(&pod)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let filter = format!("label={CONTAINER_LABEL}.pod={}", created["metadata"]["uid"].as_str().unwrap());
        assert!(
            agentd_tests::eventually(Duration::from_secs(30), || agentd_fakes::containers::listed(&filter)
                .len()
                == 1)
            .await
        );
        pod_filter = Some(filter);
    }
    let status = agentd_tests::sigterm_and_wait(&mut child, Duration::from_secs(20)).await;
    assert!(status.success(), "{status}");
    assert!(!std::path::Path::new(&path).exists(), "the kubeconfig outlived the fake");
    if let Some(filter) = pod_filter {
        assert!(agentd_fakes::containers::listed(&filter).is_empty(), "fake-kube left its container");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_init_container_injects_agentd_through_an_empty_dir() {
    // The injection pattern: an init container from the image that has agentd copies the static
    // binary into an emptyDir; the main container (an image without it) runs it from there.
    if !docker_available(IMAGE).await || !docker_available("agentd-debian:latest").await {
        return;
    }
    let fake = FakeKube::start();
    let api = Api::new(&fake);
    let pod = json!({
        "metadata": {"name": "injected"},
        "spec": {
            "volumes": [{"name": "agentd", "emptyDir": {}}],
            "initContainers": [{
                "name": "inject", "image": "agentd-debian:latest", "imagePullPolicy": "Never",
                "command": ["cp", "/usr/local/bin/agentd", "/opt/agentd/agentd"],
                "volumeMounts": [{"name": "agentd", "mountPath": "/opt/agentd"}],
            }],
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["/opt/agentd/agentd", "serve", "--listen", "0.0.0.0:7700"],
                "env": [{"name": "AGENTD_TOKEN", "value": "fake-kube-test-token"}],
                "volumeMounts": [{"name": "agentd", "mountPath": "/opt/agentd", "readOnly": true}],
            }],
        },
    });
    let (status, _) = api.post("/api/v1/namespaces/default/pods", pod).await;
    assert_eq!(status, 201);
    let pod = wait_pod(&api, "injected", Duration::from_secs(60), ready).await;
    let (mut ws, _) = exec_ws(
        &fake,
        "injected",
        &exec_query(&["/opt/agentd/agentd", "--version"], "stdout=true"),
        "v5.channel.k8s.io",
    )
    .await
    .unwrap();
    let outcome = collect(&mut ws).await;
    assert!(String::from_utf8_lossy(&outcome.stdout).starts_with("agentd "), "{outcome:?}");
    // agentd listens on the pod IP, reachable from the host.
    let address = format!("{}:7700", pod["status"]["podIP"].as_str().unwrap());
    let mut connected = false;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(&address).await.is_ok() {
            connected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(connected, "nothing listens on {address}");
}

/// Whether a `docker` CLI process with `word` (its verb) and `label` among its arguments runs now.
fn docker_cli_running(word: &str, label: &str) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().any(|entry| {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { return false };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        args.first().is_some_and(|a| a.ends_with(b"docker"))
            && args.contains(&word.as_bytes())
            && args.contains(&label.as_bytes())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fake_dropped_while_its_kubelet_makes_containers_leaves_none_behind() {
    // The fake's cleanup lists its containers and volumes once its runtime is gone. A `docker run`
    // or `docker volume create` cut short by that shutdown must not finish in the daemon after the
    // listing (measured: a CLI killed within ~20 ms of its start leaves a container that appears
    // later). Each fake is dropped just after the CLI for its Pod's volume or container starts.
    if !docker_available(IMAGE).await {
        return;
    }
    let pod = json!({
        "metadata": {"name": "cut-short"},
        "spec": {
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [{
                "name": "main", "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["sleep", "infinity"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            }],
        },
    });
    let mut instances = Vec::new();
    for word in ["create", "run"] {
        // The window is a few milliseconds wide, somewhere in the CLI's first ~40 ms: swept.
        for after_ms in (0..40).step_by(2) {
            let fake = FakeKube::start();
            let label = format!("{CONTAINER_LABEL}={}", fake.instance());
            instances.push(fake.instance().to_owned());
            let api = Api::new(&fake);
            let (status, created) = api.post("/api/v1/namespaces/default/pods", pod.clone()).await;
            assert_eq!(status, 201, "{created}");
            let deadline = Instant::now() + Duration::from_secs(30);
            while !docker_cli_running(word, &label) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
            std::thread::sleep(Duration::from_millis(after_ms));
            drop(fake);
        }
    }
    // What the daemon was still making when its client went has had time to appear.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut left = Vec::new();
    for instance in &instances {
        let filter = format!("label={CONTAINER_LABEL}={instance}");
        left.extend(
            agentd_fakes::containers::listed(&filter).into_iter().map(|id| format!("container {id}")),
        );
        let volumes =
            std::process::Command::new("docker").args(["volume", "ls", "-q", "--filter", &filter]).output();
        let volumes = String::from_utf8_lossy(&volumes.unwrap().stdout).into_owned();
        left.extend(volumes.split_whitespace().map(|v| format!("volume {v}")));
        // Removed here too, so a failing run leaves nothing either.
        agentd_fakes::fake_kube::pods::remove_all_blocking(instance);
    }
    assert!(left.is_empty(), "left behind by dropped fakes: {left:?}");
}
