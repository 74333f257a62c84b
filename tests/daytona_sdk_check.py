"""The official Daytona Python SDK against a Daytona API (the tests' fake, or the real one).

Run by tests/tests/daytona_sdk.rs with DAYTONA_API_URL and DAYTONA_API_KEY set. Prints one
`check <name> <value>` line per step; the test asserts them.
"""

import hashlib
import sys

from daytona import CreateSandboxFromImageParams, Daytona, FileDownloadRequest, FileUpload


def check(name, value):
    print(f"check {name} {value}", flush=True)


def exercise(daytona, sandbox, tag):
    check(f"{tag}-state", sandbox.state.value if hasattr(sandbox.state, "value") else sandbox.state)
    # Every byte value, a NUL and a lone 0xff: the transfer must be binary-safe.
    data = bytes(range(256)) * 4096 + b"\x00\xff\r\n"
    path = f"/tmp/sdk-check/{tag}/nested/blob.bin"
    sandbox.fs.upload_file(data, path)
    back = sandbox.fs.download_file(path)
    check(f"{tag}-download-equal", back == data)
    check(f"{tag}-sha256", hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest())
    # Several files at once, and one that is missing (an error part).
    sandbox.fs.upload_files([FileUpload(source=b"one", destination="many/one.txt"),
                             FileUpload(source=b"two", destination="many/two.txt")])
    got = sandbox.fs.download_files([FileDownloadRequest(source="many/one.txt"),
                                     FileDownloadRequest(source="many/two.txt"),
                                     FileDownloadRequest(source="many/missing.txt")])
    check(f"{tag}-bulk", ",".join(
        (r.result.decode() if isinstance(r.result, bytes) else "error") if r.error is None else "error"
        for r in got))
    result = sandbox.process.exec("echo hello $NAME; echo oops >&2; exit 3", env={"NAME": "sdk"})
    check(f"{tag}-exec-code", result.exit_code)
    check(f"{tag}-exec-result", repr(result.result))
    result = sandbox.process.exec("pwd", cwd="/tmp")
    check(f"{tag}-exec-cwd", result.result.strip())


def main():
    daytona = Daytona()
    sandbox = daytona.create()
    exercise(daytona, sandbox, "snapshot")
    daytona.delete(sandbox)
    check("snapshot-deleted", True)

    sandbox = daytona.create(CreateSandboxFromImageParams(image=sys.argv[1] if len(sys.argv) > 1 else "agentd-base-busybox:latest"))
    exercise(daytona, sandbox, "image")
    sandbox.delete()
    check("image-deleted", True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
