"""The official Kubernetes Python client against a Kubernetes API (the tests' fake-kube, or a real one).

Run by tests/tests/kube_client.rs with KUBECONFIG set. Prints one `check <name> <value>` line per
step; the test asserts them. argv[1] is the image to run (local: imagePullPolicy Never).
"""

import sys
import time

from kubernetes import client, config, watch
from kubernetes.stream import stream


def check(name, value):
    print(f"check {name} {value}", flush=True)


def main():
    image = sys.argv[1]
    config.load_kube_config()
    v1 = client.CoreV1Api()
    name = "kube-client-check"
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "kube-client-check", "tier": "test"}),
        spec=client.V1PodSpec(
            restart_policy="Never",
            containers=[client.V1Container(name="main", image=image, image_pull_policy="Never",
                                           command=["sleep", "infinity"])],
        ),
    )
    created = v1.create_namespaced_pod("default", pod)
    check("created-phase", created.status.phase)
    check("created-uid", bool(created.metadata.uid))

    # 409 for a taken name, 404 for a missing pod: ApiException with the status.
    try:
        v1.create_namespaced_pod("default", pod)
        check("conflict", "none")
    except client.ApiException as e:
        check("conflict", e.status)
    try:
        v1.read_namespaced_pod("no-such-pod", "default")
        check("missing", "none")
    except client.ApiException as e:
        check("missing", e.status)

    got = v1.read_namespaced_pod(name, "default")
    check("get-name", got.metadata.name)
    listed = v1.list_namespaced_pod("default", label_selector="app=kube-client-check,tier in (test)")
    check("list", ",".join(p.metadata.name for p in listed.items))
    check("list-other", len(v1.list_namespaced_pod("default", label_selector="app!=kube-client-check").items))

    # Ready, seen through a watch.
    ready = False
    w = watch.Watch()
    for event in w.stream(v1.list_namespaced_pod, "default", field_selector=f"metadata.name={name}",
                          timeout_seconds=60):
        conditions = event["object"].status.conditions or []
        if any(c.type == "Ready" and c.status == "True" for c in conditions):
            ready = True
            w.stop()
    check("ready", ready)
    running = v1.read_namespaced_pod(name, "default")
    check("phase", running.status.phase)
    check("pod-ip", bool(running.status.pod_ip))

    # Exec: stdout and stderr apart, the exit code from the error channel.
    resp = stream(v1.connect_get_namespaced_pod_exec, name, "default",
                  command=["sh", "-c", "echo out; echo err >&2; exit 3"],
                  stderr=True, stdin=False, stdout=True, tty=False, _preload_content=False)
    resp.run_forever(timeout=30)
    check("exec-stdout", repr(resp.read_stdout()))
    check("exec-stderr", repr(resp.read_stderr()))
    check("exec-code", resp.returncode)
    check("exec-protocol", resp.subprotocol)

    # Stdin written, then closed (the v5 close signal): the command sees EOF and ends.
    resp = stream(v1.connect_get_namespaced_pod_exec, name, "default",
                  command=["sh", "-c", "wc -c; echo done"],
                  stderr=True, stdin=True, stdout=True, tty=False, _preload_content=False)
    resp.write_stdin("twelve bytes")
    resp.close_channel(0)
    resp.run_forever(timeout=30)
    check("stdin", repr(resp.read_stdout()))
    check("stdin-code", resp.returncode)

    # The preloaded form (what most callers use): the output as one string.
    out = stream(v1.connect_get_namespaced_pod_exec, name, "default", command=["echo", "preloaded"],
                 stderr=True, stdin=False, stdout=True, tty=False)
    check("preloaded", repr(out))

    v1.delete_namespaced_pod(name, "default")
    deadline = time.time() + 30
    gone = False
    while time.time() < deadline:
        try:
            v1.read_namespaced_pod(name, "default")
            time.sleep(0.2)
        except client.ApiException as e:
            gone = e.status == 404
            break
    check("deleted", gone)
    print("done", flush=True)


if __name__ == "__main__":
    main()
