#!/usr/bin/env bash
# Builds agentd-base-busybox:latest FROM scratch out of Debian's busybox-static package.
#
#   images/base/busybox.sh [--force]
#
# No registry is needed: the package comes through apt (the machine's own apt sources). Skips the
# build when the image already exists, unless --force.
set -euo pipefail

IMAGE=agentd-base-busybox:latest
FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h | --help)
            sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "busybox.sh: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

say() { echo "[base/busybox] $*"; }

if [ "$FORCE" = 0 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    say "$IMAGE exists, skipping (--force to rebuild)"
    exit 0
fi

# Applets agentd's users rely on; the build fails if this busybox lacks one.
REQUIRED_APPLETS="sh ls cat echo sleep mkdir rm mv cp head tail grep sed seq printf env sort wc tr
touch ps kill id true false test [ chmod find xargs setsid timeout du df date pwd readlink ln uname"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agentd-base-busybox.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

say "downloading busybox-static with apt-get"
cd "$WORK"
# -o APT::Sandbox::User=root: download into this root-owned temp dir without the _apt warning.
if ! apt-get -q -o APT::Sandbox::User=root download busybox-static >/dev/null; then
    say "apt-get download failed; running apt-get update and retrying"
    apt-get -q update >/dev/null
    apt-get -q -o APT::Sandbox::User=root download busybox-static >/dev/null
fi
DEB=$(ls "$WORK"/busybox-static_*.deb)
VERSION=$(dpkg-deb -f "$DEB" Version)
say "unpacking busybox-static $VERSION"
dpkg-deb -x "$DEB" "$WORK/pkg"
BUSYBOX="$WORK/pkg/bin/busybox"

ROOT="$WORK/rootfs"
mkdir -p "$ROOT/bin" "$ROOT/etc" "$ROOT/root" "$ROOT/tmp" "$ROOT/workspace" "$ROOT/usr/local/bin" \
    "$ROOT/run" "$ROOT/var/tmp" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev"
install -m 0755 "$BUSYBOX" "$ROOT/bin/busybox"

APPLETS=$("$BUSYBOX" --list)
for applet in $REQUIRED_APPLETS; do
    if ! grep -qxF -- "$applet" <<<"$APPLETS"; then
        echo "busybox.sh: busybox-static $VERSION has no applet '$applet'" >&2
        exit 1
    fi
done
count=0
while IFS= read -r applet; do
    case "$applet" in
        busybox | "" | */*) continue ;;
    esac
    ln -s busybox "$ROOT/bin/$applet"
    count=$((count + 1))
done <<<"$APPLETS"
say "installed /bin/busybox with $count applet links"

cat >"$ROOT/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
EOF
cat >"$ROOT/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
EOF
chmod 0644 "$ROOT/etc/passwd" "$ROOT/etc/group"
chmod 0700 "$ROOT/root"
chmod 1777 "$ROOT/tmp" "$ROOT/var/tmp"
chmod 0755 "$ROOT/workspace"

# A tar keeps modes (/tmp 1777), symlinks and root ownership exactly; ADD unpacks it in the image.
CTX="$WORK/context"
mkdir -p "$CTX"
tar -C "$ROOT" --numeric-owner --owner=0 --group=0 -cf "$CTX/rootfs.tar" .
cat >"$CTX/Dockerfile" <<'EOF'
FROM scratch
ARG BUSYBOX_VERSION
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /workspace
LABEL org.opencontainers.image.title="agentd-base-busybox" \
      org.opencontainers.image.description="Minimal base for agentd: Debian busybox-static as /bin/sh and coreutils" \
      org.opencontainers.image.licenses="GPL-2.0-only" \
      dev.agentd.base="busybox" \
      dev.agentd.busybox-version="${BUSYBOX_VERSION}"
CMD ["/bin/sh"]
EOF

OLD_ID=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
say "docker build -t $IMAGE"
# Quiet on success (the old engine's builder warns that it is deprecated); the whole log on failure.
if ! docker build -q --build-arg "BUSYBOX_VERSION=$VERSION" -t "$IMAGE" "$CTX" >"$WORK/build.log" 2>&1; then
    cat "$WORK/build.log" >&2
    exit 1
fi
# A rebuilt tag leaves the previous image dangling: drop it (kept while images or containers use it).
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
    docker rmi "$OLD_ID" >/dev/null 2>&1 || true
fi
say "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
