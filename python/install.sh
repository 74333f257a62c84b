#!/usr/bin/env bash
# Builds the agentd Python package and installs it, with its test tools, into a venv.
#
#   python/install.sh [VENV]        (default VENV: target/python-venv; made when missing)
#
# The wheel carries the static agentd (built here as images/build.sh builds it, so the two share
# cargo's cache) and the native module, built by maturin from PyPI with the `wheel` profile.
# Afterwards: VENV/bin/python -m pytest python/tests
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/target/python-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
venv=$(cd "$venv" && pwd)
cd "$root"

"$venv/bin/pip" install --quiet --disable-pip-version-check "maturin==1.16.0"

target=x86_64-unknown-linux-gnu
RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release -p agentd --target "$target"
mkdir -p python/agentd/bin
install -m 0755 "target/$target/release/agentd" python/agentd/bin/agentd

wheels=target/wheels
rm -f "$wheels"/agentd-*.whl
(cd python && "$venv/bin/maturin" build --quiet --profile wheel --out "$root/$wheels")
wheel=$(ls "$wheels"/agentd-*.whl)
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$venv/bin/pip" install --quiet --disable-pip-version-check "$wheel[test]"
echo "installed $(basename "$wheel") into $venv"
