//! The fake Kubernetes API server (`agentd_tests::fake_kube`) checked over HTTP and websockets
//! against the API's documented behaviour: auth, discovery, the generic verbs and their `Status`
//! errors, selectors, watches, Pods as real containers, exec on the channel protocols.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use agentd_tests::fake_kube::FakeKube;
use serde_json::{Value, json};

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
        agentd_tests::fake_kube::ResourceType::new("example.dev", "v1alpha1", "widgets", "Widget", true)
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
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
