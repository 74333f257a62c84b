"""The official agent-sandbox Python client (k8s-agent-sandbox) against fake-kube.

Run by tests/tests/fake_kube_sandbox.rs with KUBECONFIG naming the fake and argv[1] the image.
Prints `check <name> <value>` lines the Rust test compares, then `done`.

Commands go through the client's in-cluster mode (SandboxInClusterConnectionConfig): straight to
the pod IP from the Sandbox's status, no router. The pod runs a stand-in for the runtime image's
HTTP API (POST /execute -> {stdout, stderr, exit_code}), because no registry image can be pulled
here; everything else (claim, watch, Sandbox, status, delete) is the client's own Kubernetes calls.
"""

import sys
import time

from kubernetes import client, config
from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.exceptions import SandboxTemplateNotFoundError, SandboxWarmPoolNotFoundError
from k8s_agent_sandbox.models import SandboxInClusterConnectionConfig

IMAGE = sys.argv[1]
NS = "default"
EXT = ("extensions.agents.x-k8s.io", "v1beta1")

# The runtime stand-in: one HTTP endpoint on 8888 that runs a shell command.
SERVER = r'''
import json, subprocess
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        p = subprocess.run(["/bin/sh", "-c", body["command"]], capture_output=True, text=True)
        out = json.dumps({"stdout": p.stdout, "stderr": p.stderr, "exit_code": p.returncode}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
HTTPServer(("0.0.0.0", 8888), H).serve_forever()
'''


def check(name, value):
    print(f"check {name} {value}", flush=True)


def main():
    config.load_kube_config()
    api = client.CustomObjectsApi()
    core = client.CoreV1Api()
    api.create_namespaced_custom_object(*EXT, NS, "sandboxtemplates", {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
        "metadata": {"name": "py-runtime"},
        "spec": {"podTemplate": {"spec": {"containers": [{
            "name": "runtime", "image": IMAGE, "imagePullPolicy": "Never",
            "command": ["python3", "-c", SERVER], "ports": [{"containerPort": 8888}],
        }], "terminationGracePeriodSeconds": 0}}},
    })
    api.create_namespaced_custom_object(*EXT, NS, "sandboxwarmpools", {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "py-pool"},
        "spec": {"replicas": 1, "sandboxTemplateRef": {"name": "py-runtime"}},
    })
    # A pool that names a template nobody made.
    api.create_namespaced_custom_object(*EXT, NS, "sandboxwarmpools", {
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxWarmPool",
        "metadata": {"name": "orphan-pool"},
        "spec": {"replicas": 0, "sandboxTemplateRef": {"name": "no-such-template"}},
    })
    # Let the pool's one sandbox come up, so the claim below is a warm one.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        pool = api.get_namespaced_custom_object(*EXT, NS, "sandboxwarmpools", "py-pool")
        if (pool.get("status") or {}).get("readyReplicas", 0) >= 1:
            break
        time.sleep(0.2)
    check("pool-ready", (pool.get("status") or {}).get("readyReplicas", 0))

    sc = SandboxClient(connection_config=SandboxInClusterConnectionConfig(server_port=8888))
    sandbox = sc.create_sandbox(warmpool="py-pool", namespace=NS, sandbox_ready_timeout=120)
    check("status", sandbox.status()[0])
    check("warm", sandbox.sandbox_id.startswith("py-pool-") and sandbox.sandbox_id != sandbox.claim_name)
    check("pod-name", sandbox.get_pod_name() == sandbox.sandbox_id)
    result = sandbox.commands.run("echo hello; echo oops >&2; exit 3")
    check("run", f"{result.exit_code} {result.stdout!r} {result.stderr!r}")
    check("listed", sandbox.claim_name in sc.list_all_sandboxes(namespace=NS))

    try:
        sc.create_sandbox(warmpool="no-such-pool", namespace=NS, sandbox_ready_timeout=60)
        check("missing-pool", "created")
    except SandboxWarmPoolNotFoundError:
        check("missing-pool", "SandboxWarmPoolNotFoundError")
    try:
        sc.create_sandbox(warmpool="orphan-pool", namespace=NS, sandbox_ready_timeout=60)
        check("missing-template", "created")
    except SandboxTemplateNotFoundError:
        check("missing-template", "SandboxTemplateNotFoundError")

    claim, sandbox_id = sandbox.claim_name, sandbox.sandbox_id
    sc.delete_sandbox(claim, namespace=NS)
    deadline = time.monotonic() + 90
    left = ["?"]
    while time.monotonic() < deadline and left:
        pods = [p.metadata.name for p in core.list_namespaced_pod(NS).items]
        sandboxes = [s["metadata"]["name"] for s in api.list_namespaced_custom_object(
            "agents.x-k8s.io", "v1beta1", NS, "sandboxes")["items"]]
        left = [f"pod {sandbox_id}"] * (sandbox_id in pods) + [f"sandbox {sandbox_id}"] * (sandbox_id in sandboxes)
        time.sleep(0.2)
    check("deleted", left or True)
    check("claims-left", sorted(sc.list_all_sandboxes(namespace=NS)))
    print("done", flush=True)


main()
