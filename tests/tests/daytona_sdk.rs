//! The fake Daytona (`agentd_fakes::fake_daytona`) checked against the official Python SDK, and its
//! wire details (auth, states, the bulk multipart layouts, the exec 408) checked by hand.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers outside #[test] functions: a failed step aborts the test with its message"
)]

use std::time::{Duration, Instant};

use agentd_fakes::fake_daytona::{CONTAINER_LABEL, DEFAULT_IMAGE, FakeDaytona};
use agentd_tests::{Need, docker_available, skip};
use serde_json::{Value, json};

const BUSYBOX: &str = "agentd-base-busybox:latest";

/// Containers of `fake` still there (any state).
fn containers_of(fake: &FakeDaytona) -> Vec<String> {
    agentd_fakes::containers::listed(&format!("label={CONTAINER_LABEL}={}", fake.instance()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_creates_uploads_downloads_executes_and_deletes() {
    if !docker_available(DEFAULT_IMAGE).await || !docker_available(BUSYBOX).await {
        return;
    }
    let Some(python) = std::env::var_os("AGENTD_DAYTONA_PYTHON") else {
        skip(Need::DaytonaSdk, "AGENTD_DAYTONA_PYTHON is not set (.ci/run installs the SDK in a venv)");
        return;
    };
    let fake = FakeDaytona::start();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("daytona_sdk_check.py");
    // An empty working directory: no `.env` for the SDK to pick up.
    let cwd = tempfile::tempdir().unwrap();
    let mut command = tokio::process::Command::new(python);
    command.arg(&script).arg(BUSYBOX).current_dir(cwd.path()).kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("DAYTONA_") {
            command.env_remove(key);
        }
    }
    command.env("DAYTONA_API_URL", fake.api_url()).env("DAYTONA_API_KEY", fake.api_key());
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the SDK script finishes")
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!(
        "SDK script took {:?}; stderr:\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("requests the SDK made:\n  {}", fake.requests().join("\n  "));
    assert!(output.status.success(), "the SDK script failed:\n{stdout}");
    let mut expected = Vec::new();
    for tag in ["snapshot", "image"] {
        expected.extend([
            format!("check {tag}-state started"),
            format!("check {tag}-download-equal True"),
            format!("check {tag}-sha256 True"),
            format!("check {tag}-bulk one,two,error"),
            format!("check {tag}-exec-code 3"),
            format!("check {tag}-exec-result 'hello sdk\\noops\\n'"),
            format!("check {tag}-exec-cwd /tmp"),
            format!("check {tag}-deleted True"),
        ]);
    }
    expected.push("done".to_owned());
    let got: Vec<&str> = stdout.lines().collect();
    assert_eq!(got, expected);
    // Both creates went through the API (one from the default snapshot, one through buildInfo).
    let requests = fake.requests();
    assert_eq!(requests.iter().filter(|r| *r == "POST /api/sandbox").count(), 2, "{requests:?}");
    assert!(requests.iter().any(|r| r.ends_with("/files/bulk-upload")), "{requests:?}");
    assert!(requests.iter().any(|r| r.ends_with("/process/execute")), "{requests:?}");
    assert!(containers_of(&fake).is_empty(), "the SDK's delete left containers");
}

/// A multipart body with the given (name, filename, bytes) parts, in that order.
fn multipart(parts: &[(&str, Option<&str>, &[u8])]) -> (String, Vec<u8>) {
    let boundary = "test-boundary-1234";
    let mut body = Vec::new();
    for (name, filename, bytes) in parts {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"").as_bytes(),
        );
        if let Some(filename) = filename {
            body.extend_from_slice(
                format!("; filename=\"{filename}\"\r\nContent-Type: application/octet-stream").as_bytes(),
            );
        }
        body.extend_from_slice(b"\r\n\r\n");
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.http.request(method, format!("{}{path}", self.base)).bearer_auth(&self.key);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_follows_the_wire_facts_for_states_multipart_and_the_exec_timeout() {
    if !docker_available(BUSYBOX).await {
        return;
    }
    let fake = FakeDaytona::start();
    let http = reqwest::Client::new();
    let api = Api { http: http.clone(), base: fake.api_url(), key: fake.api_key().to_owned() };

    // No key, or a wrong one: 401 with Daytona's body.
    let response = http.get(format!("{}/sandbox", fake.api_url())).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"statusCode": 401, "message": "Unauthorized"})
    );
    let response = http.get(format!("{}/sandbox", fake.api_url())).bearer_auth("wrong").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 401);

    // From an image: pending_build → building_snapshot → starting → started, one step per GET.
    let create =
        json!({"buildInfo": {"dockerfileContent": format!("FROM {BUSYBOX}\n")}, "labels": {"t": "1"}});
    let (status, sandbox) = api.call(reqwest::Method::POST, "/sandbox", Some(create)).await;
    assert_eq!(status, 200, "{sandbox}");
    assert_eq!(sandbox["state"], "pending_build");
    for key in
        ["id", "organizationId", "name", "user", "env", "labels", "public", "networkBlockAll", "target"]
    {
        assert!(!sandbox[key].is_null(), "{key} missing: {sandbox}");
    }
    for key in ["cpu", "gpu", "memory", "disk"] {
        assert!(sandbox[key].is_number(), "{key}: {sandbox}");
    }
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let toolbox = format!("{}/{id}", sandbox["toolboxProxyUrl"].as_str().unwrap());
    assert_eq!(toolbox, format!("{}/{id}", fake.api_url().replace("/api", "/toolbox")));
    let mut states = Vec::new();
    for _ in 0..3 {
        states.push(api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await.1["state"].clone());
    }
    assert_eq!(states, [json!("building_snapshot"), json!("starting"), json!("started")]);

    // Bulk upload: parts in order (a `.file` before its `.path` is refused), mkdir -p, overwrite.
    let payload: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let (content_type, body) = multipart(&[
        ("files[0].path", None, b"/tmp/wire/deep/a.bin"),
        ("files[0].file", Some("/tmp/wire/deep/a.bin"), b"old"),
        ("files[1].path", None, b"/tmp/wire/deep/a.bin"),
        ("files[1].file", Some("/tmp/wire/deep/a.bin"), &payload),
    ]);
    let upload = |content_type: String, body: Vec<u8>| {
        http.post(format!("{toolbox}/files/bulk-upload"))
            .bearer_auth(fake.api_key())
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    assert_eq!(upload(content_type, body).await.unwrap().status().as_u16(), 200);
    let (content_type, body) = multipart(&[("files[0].file", Some("/tmp/x"), b"x")]);
    assert_eq!(upload(content_type, body).await.unwrap().status().as_u16(), 400);

    // Bulk download: one part per path, in request order, file or error, Daytona's boundary.
    let response = http
        .post(format!("{toolbox}/files/bulk-download"))
        .bearer_auth(fake.api_key())
        .json(&json!({"paths": ["/tmp/wire/deep/a.bin", "/tmp/wire/missing", "/tmp/wire"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "multipart/form-data; boundary=DAYTONA-FILE-BOUNDARY"
    );
    let body = response.bytes().await.unwrap().to_vec();
    let mut first = b"--DAYTONA-FILE-BOUNDARY\r\nContent-Disposition: form-data; name=\"file\"; \
        filename=\"/tmp/wire/deep/a.bin\"; filename*=utf-8''%2Ftmp%2Fwire%2Fdeep%2Fa.bin\r\n\
        Content-Type: application/octet-stream\r\nContent-Length: 70000\r\n\r\n"
        .to_vec();
    first.extend_from_slice(&payload);
    first.extend_from_slice(b"\r\n--DAYTONA-FILE-BOUNDARY\r\n");
    assert!(
        body.starts_with(&first),
        "first part:\n{}",
        String::from_utf8_lossy(&body[..300.min(body.len())])
    );
    assert!(body.ends_with(b"\r\n--DAYTONA-FILE-BOUNDARY--\r\n"));
    let rest =
        String::from_utf8_lossy(&body[first.len() - "--DAYTONA-FILE-BOUNDARY\r\n".len()..]).into_owned();
    let parts: Vec<&str> = rest.split("--DAYTONA-FILE-BOUNDARY").filter(|p| p.len() > 4).collect();
    assert_eq!(parts.len(), 2, "{rest}");
    for (part, (path, status, code)) in parts
        .iter()
        .zip([("/tmp/wire/missing", 404, "FILE_NOT_FOUND"), ("/tmp/wire", 400, "INVALID_FILE_PATH")])
    {
        let (head, json_body) = part.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("name=\"error\"; filename=\"{path}\"")), "{head}");
        assert!(head.contains("Content-Type: application/json; charset=utf-8"), "{head}");
        let error: Value = serde_json::from_str(json_body.trim_end()).unwrap();
        assert_eq!(
            (error["statusCode"].as_u64(), error["code"].as_str()),
            (Some(status), Some(code)),
            "{error}"
        );
        for key in ["message", "timestamp", "path", "method"] {
            assert!(error[key].is_string(), "{key}: {error}");
        }
    }
    let response = http
        .post(format!("{toolbox}/files/bulk-download"))
        .bearer_auth(fake.api_key())
        .json(&json!({"paths": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert!(response.json::<Value>().await.unwrap()["error"].is_string());

    // Exec: the command on sh's stdin, cwd and envs, stdout and stderr in one `result`.
    let exec = |body: Value| {
        let api = &api;
        let path = format!("/toolbox/{id}/process/execute");
        async move {
            let url = format!("{}{path}", api.base.replace("/api", ""));
            let response = api.http.post(url).bearer_auth(&api.key).json(&body).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        }
    };
    let (status, reply) = exec(
        json!({"command": "echo \"$A\" $(pwd); echo err >&2; exit 7", "cwd": "/tmp", "envs": {"A": "x y"}}),
    )
    .await;
    assert_eq!((status, reply), (200, json!({"exitCode": 7, "result": "x y /tmp\nerr\n"})));

    // Past its timeout: 408 REQUEST_TIMEOUT, and the command's processes (a background child too)
    // are killed.
    let started = Instant::now();
    let (status, reply) = exec(json!({
        "command": "echo $$ > /tmp/pids; sleep 300 & echo $! >> /tmp/pids; sleep 301; echo never",
        "timeout": 1
    }))
    .await;
    eprintln!("408 after {:?}", started.elapsed());
    assert_eq!(status, 408, "{reply}");
    assert_eq!(reply["code"], "REQUEST_TIMEOUT");
    assert!(reply.get("result").is_none(), "{reply}");
    let check = json!({"command": "for p in $(cat /tmp/pids); do [ -d /proc/$p ] && echo alive $p; done; echo checked"});
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, reply) = exec(check.clone()).await;
        if reply["result"] == "checked\n" {
            break;
        }
        assert!(Instant::now() < deadline, "processes outlived the timeout: {reply}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Preview: the proxy wants the token (header or query parameter), forwards to the container's
    // port, and a restart rotates the token.
    let (status, reply) = exec(
        json!({"command": "mkdir -p /tmp/www && echo hi > /tmp/www/index.html && httpd -p 8080 -h /tmp/www"}),
    )
    .await;
    assert_eq!((status, &reply["exitCode"]), (200, &json!(0)), "{reply}");
    let (status, preview) =
        api.call(reqwest::Method::GET, &format!("/sandbox/{id}/ports/8080/preview-url"), None).await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["sandboxId"], id.as_str());
    let (url, token) =
        (preview["url"].as_str().unwrap().to_owned(), preview["token"].as_str().unwrap().to_owned());
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    // A fresh connection each time: the proxy checks the token once per connection.
    let fresh = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let get = |url: String, token: Option<String>| {
        let fresh = fresh.clone();
        async move {
            let mut request = fresh.get(url);
            if let Some(token) = token {
                request = request.header("X-Daytona-Preview-Token", token);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        }
    };
    assert_eq!(get(format!("{url}/index.html"), None).await.0, 401);
    assert_eq!(get(format!("{url}/index.html"), Some("wrong".to_owned())).await.0, 401);
    assert_eq!(get(format!("{url}/index.html"), Some(token.clone())).await, (200, "hi\n".to_owned()));
    let by_query = get(format!("{url}/index.html?DAYTONA_SANDBOX_AUTH_KEY={token}"), None).await;
    assert_eq!(by_query, (200, "hi\n".to_owned()));
    let (_, stopped) = api.call(reqwest::Method::POST, &format!("/sandbox/{id}/stop"), None).await;
    assert_eq!(stopped["state"], "stopping");
    assert_eq!(api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await.1["state"], "stopped");
    let (_, started) = api.call(reqwest::Method::POST, &format!("/sandbox/{id}/start"), None).await;
    assert_eq!(started["state"], "starting");
    assert_eq!(api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await.1["state"], "started");
    let (_, again) =
        api.call(reqwest::Method::GET, &format!("/sandbox/{id}/ports/8080/preview-url"), None).await;
    let new_token = again["token"].as_str().unwrap().to_owned();
    assert_ne!(new_token, token, "the token did not rotate on restart");
    assert_eq!(get(format!("{url}/index.html"), Some(token)).await.0, 401);
    // The restart ended httpd: the new token passes, and nothing answers behind it.
    assert_eq!(get(format!("{url}/index.html"), Some(new_token)).await.0, 502);

    // Delete: the Sandbox back, then `destroyed`, then 404 NOT_FOUND; the container is gone.
    let (status, deleted) = api.call(reqwest::Method::DELETE, &format!("/sandbox/{id}"), None).await;
    assert_eq!((status, deleted["id"].as_str()), (200, Some(id.as_str())));
    assert!(containers_of(&fake).is_empty());
    let (_, gone) = api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await;
    assert_eq!(gone["state"], "destroyed");
    let (status, gone) = api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await;
    assert_eq!((status, gone["code"].as_str()), (404, Some("NOT_FOUND")));

    // Knob: an image named fake:build-failed ends in build_failed with a reason.
    let create = json!({"buildInfo": {"dockerfileContent": "FROM fake:build-failed\n"}});
    let (_, sandbox) = api.call(reqwest::Method::POST, "/sandbox", Some(create)).await;
    let id = sandbox["id"].as_str().unwrap().to_owned();
    let mut last = Value::Null;
    for _ in 0..3 {
        last = api.call(reqwest::Method::GET, &format!("/sandbox/{id}"), None).await.1;
    }
    assert_eq!(last["state"], "build_failed");
    assert!(last["errorReason"].as_str().is_some_and(|r| !r.is_empty()), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_daytona_binary_prints_exports_and_serves_until_killed() {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(agentd_tests::binary("fake-daytona"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url_line = lines.next().unwrap().unwrap();
    let key_line = lines.next().unwrap().unwrap();
    let url = url_line.strip_prefix("export DAYTONA_API_URL=").expect("url line").to_owned();
    let key = key_line.strip_prefix("export DAYTONA_API_KEY=").expect("key line").to_owned();
    assert!(url.starts_with("http://127.0.0.1:") && url.ends_with("/api"), "{url}");
    let http = reqwest::Client::new();
    let listed = http.get(format!("{url}/sandbox")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(listed.status().as_u16(), 200);
    assert_eq!(listed.json::<Value>().await.unwrap(), json!([]));
    let unknown = http.get(format!("{url}/sandbox/nope")).bearer_auth(&key).send().await.unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    assert_eq!(unknown.json::<Value>().await.unwrap()["code"], "NOT_FOUND");
    // A sandbox (a container) made through it is removed when it is killed.
    let with_docker = docker_available(BUSYBOX).await;
    let mut sandbox_filter = None;
    if with_docker {
        let created = http
            .post(format!("{url}/sandbox"))
            .bearer_auth(&key)
            .json(&json!({"snapshot": BUSYBOX}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap();
        let filter = format!("label={CONTAINER_LABEL}.sandbox={}", created["id"].as_str().unwrap());
        assert_eq!(agentd_fakes::containers::listed(&filter).len(), 1, "{created}");
        sandbox_filter = Some(filter);
    }
    let status = agentd_tests::sigterm_and_wait(&mut child, Duration::from_secs(20)).await;
    assert!(status.success(), "{status}");
    if let Some(filter) = sandbox_filter {
        assert!(agentd_fakes::containers::listed(&filter).is_empty(), "fake-daytona left its container");
    }
}
