#!/usr/bin/env bash
# Builds the agentd Python package (distribution `agentd-sandbox`) and installs it, with its test
# tools, into a venv.
#
#   python/install.sh [VENV]        (default VENV: target/python-venv; made when missing)
#
# The same build as `pip install ./python`, with maturin pinned: the wheel carries the static agentd
# and the native module, both built by cargo into target/. Nothing else is written.
# Afterwards: VENV/bin/python -m pytest python/tests
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/target/python-venv}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Absolute: pip runs the build backend from another directory, with this PATH.
venv=$(cd "$venv" && pwd)

pip() { "$venv/bin/pip" --quiet --disable-pip-version-check "$@"; }
pip install "maturin==1.16.0"
# Without build isolation pip runs the venv's maturin, which it looks for on PATH.
PATH="$venv/bin:$PATH" pip install --no-build-isolation "$root/python[test]"
echo "installed $("$venv/bin/python" -c 'import importlib.metadata as m; print("agentd-sandbox", m.version("agentd-sandbox"))') into $venv"
