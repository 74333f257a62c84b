"""The official Modal Python client against a Modal control plane (the tests' fake, or the real one).

Run by tests/tests/modal_sdk.rs with MODAL_SERVER_URL, MODAL_TOKEN_ID and MODAL_TOKEN_SECRET set,
once with MODAL_SANDBOX_V2=0 (the V1 sandbox RPCs) and once with 1 (the client's default, the `*V2`
RPCs). Prints one `check <name> <value>` line per step; the test asserts them.
"""

import sys

import modal


def check(name, value):
    print(f"check {name} {value}", flush=True)


def main():
    image_name = sys.argv[1] if len(sys.argv) > 1 else "agentd-base-debian:latest"
    app = modal.App.lookup("agentd-sdk-check", create_if_missing=True)
    sb = modal.Sandbox.create(
        app=app,
        image=modal.Image.from_registry(image_name),
        timeout=300,
        encrypted_ports=[8080],
        tags={"dev.agentd.sandbox": "sdk-check"},
    )
    check("sandbox-id", sb.object_id.startswith("sb-"))
    listed = [s.object_id for s in modal.Sandbox.list(app_id=app.app_id, tags={"dev.agentd.sandbox": "sdk-check"})]
    check("listed", listed == [sb.object_id])
    tunnel = sb.tunnels()[8080]
    check("tunnel-host", tunnel.host)

    p = sb.exec("sh", "-c", "echo hi; echo err >&2; exit 3")
    check("stdout", repr(p.stdout.read()))
    check("stderr", repr(p.stderr.read()))
    check("exit-code", p.wait())

    p = sb.exec("cat", text=False)
    p.stdin.write(b"ping\x00\xff")
    p.stdin.write_eof()
    p.stdin.drain()
    check("stdin-echo", repr(p.stdout.read()))
    check("stdin-exit-code", p.wait())

    check("poll-running", sb.poll())
    sb.terminate()
    sb.wait(raise_on_termination=False)
    check("returncode", sb.returncode)
    print("done", flush=True)


if __name__ == "__main__":
    main()
