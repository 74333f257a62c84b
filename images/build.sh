#!/usr/bin/env bash
# Builds the agentd container images without any registry:
#   agentd-busybox:latest  on agentd-base-busybox:latest (images/base/busybox.sh)
#   agentd-debian:latest   on agentd-base-debian:latest  (images/base/debian.sh, Debian + python3, python)
#
#   images/build.sh [--only busybox|debian] [--force] [--force-base]
#
# Builds the static agentd first (cargo makes that a no-op when it is fresh). A base image is built
# only when missing (the Debian one also when its recipe changed; --force-base rebuilds it). An agentd image is skipped when it exists and carries
# the current binary's sha256 and base image id in its labels, unless --force. Works from any cwd.
set -euo pipefail

ONLY=""
FORCE=0
FORCE_BASE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --only)
            [ $# -ge 2 ] || { echo "build.sh: --only needs busybox or debian" >&2; exit 2; }
            ONLY=$2
            shift
            ;;
        --only=*) ONLY=${1#--only=} ;;
        --force) FORCE=1 ;;
        --force-base) FORCE_BASE=1 ;;
        -h | --help)
            sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "build.sh: unknown argument: $1 (see --help)" >&2
            exit 2
            ;;
    esac
    shift
done
case "$ONLY" in
    "") FLAVOURS="busybox debian" ;;
    busybox | debian) FLAVOURS=$ONLY ;;
    *)
        echo "build.sh: --only takes busybox or debian, not '$ONLY'" >&2
        exit 2
        ;;
esac

IMAGES_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$IMAGES_DIR/.." && pwd)
cd "$REPO_ROOT"

say() { echo "[images] $*"; }
elapsed() { echo "$(($(date +%s) - $1)) s"; }

TARGET=x86_64-unknown-linux-gnu
BIN="target/$TARGET/release/agentd"

t=$(date +%s)
say "cargo build --release -p agentd --target $TARGET (static)"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --release -p agentd --target "$TARGET"
SHA=$(sha256sum "$BIN" | cut -d' ' -f1)
# "path+file:///…/agent#agentd@0.1.0" (older cargo: "…#0.1.0"): the version is after the last # @ or :.
VERSION=$(cargo pkgid -q -p agentd 2>/dev/null | sed 's/.*[#@:]//')
VERSION=${VERSION:-0.0.0}
say "agentd $VERSION, $(stat -c %s "$BIN") bytes, sha256 ${SHA:0:16}… ($(elapsed "$t"))"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agentd-images.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

for flavour in $FLAVOURS; do
    base="agentd-base-$flavour:latest"
    image="agentd-$flavour:latest"

    t=$(date +%s)
    base_args=()
    [ "$FORCE_BASE" = 1 ] && base_args=(--force)
    "$IMAGES_DIR/base/$flavour.sh" "${base_args[@]}"
    base_id=$(docker image inspect -f '{{.Id}}' "$base")

    if [ "$FORCE" = 0 ] && [ "$FORCE_BASE" = 0 ] &&
        labels=$(docker image inspect -f '{{index .Config.Labels "dev.agentd.binary-sha256"}} {{index .Config.Labels "dev.agentd.base-image-id"}}' "$image" 2>/dev/null) &&
        [ "$labels" = "$SHA $base_id" ]; then
        say "$image is up to date (same agentd sha256 and base), skipping (--force to rebuild)"
        continue
    fi

    old_id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
    ctx="$WORK/$flavour"
    mkdir -p "$ctx"
    cp "$IMAGES_DIR/Dockerfile" "$ctx/Dockerfile"
    install -m 0755 "$BIN" "$ctx/agentd"
    say "docker build -t $image (BASE=$base)"
    # Quiet on success (the old engine's builder warns that it is deprecated); the whole log on failure.
    if ! docker build -q \
        --build-arg "BASE=$base" \
        --build-arg "VERSION=$VERSION" \
        --build-arg "BINARY_SHA256=$SHA" \
        --build-arg "BASE_IMAGE_ID=$base_id" \
        -t "$image" "$ctx" >"$WORK/build-$flavour.log" 2>&1; then
        cat "$WORK/build-$flavour.log" >&2
        exit 1
    fi
    # The previous build of this tag is now dangling: drop it (kept if a container still uses it).
    new_id=$(docker image inspect -f '{{.Id}}' "$image")
    if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
        docker rmi "$old_id" >/dev/null 2>&1 || true
    fi

    # Smoke test: the binary runs in this image (static: no libc needed from the base).
    if ! docker run --rm --entrypoint /usr/local/bin/agentd "$image" --help >/dev/null 2>"$WORK/smoke.log"; then
        cat "$WORK/smoke.log" >&2
        echo "build.sh: agentd does not run in $image" >&2
        exit 1
    fi
    say "built $image: $(docker image inspect -f '{{.Size}}' "$image") bytes, agentd runs in it ($(elapsed "$t"))"
done
say "done: $(for f in $FLAVOURS; do printf 'agentd-%s:latest\n' "$f"; done | paste -sd' ')"
