#!/usr/bin/env bash
# Builds agentd-base-debian:latest (Debian minbase + python3, `python` naming it) with debootstrap and
# docker import.
#
#   images/base/debian.sh [--force] [--print-source]
#
# No registry is needed: the Debian mirror and suite are read at run time from this machine's apt
# sources (/etc/apt/sources.list, /etc/apt/sources.list.d/*.list and *.sources). The variables
# AGENTD_DEBIAN_MIRROR and AGENTD_DEBIAN_SUITE override them. Skips the build when the image exists
# and was made by this very script (its sha256 in the label dev.agentd.recipe-sha256), unless --force. Takes a minute or so. --print-source prints the mirror and suite it would
# use, and exits.
set -euo pipefail

IMAGE=agentd-base-debian:latest
FORCE=0
PRINT_SOURCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        --print-source) PRINT_SOURCE=1 ;;
        -h | --help)
            sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "debian.sh: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

say() { echo "[base/debian] $*"; }

# Prints "URI SUITE" for every enabled binary (deb) entry of the machine's apt sources, one line each,
# in apt's order: sources.list, then sources.list.d/ (*.list one-line format, *.sources deb822).
apt_source_entries() {
    local file
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$file" ] || continue
        # deb [opt=val ...] URI SUITE [COMPONENT...]
        sed -e 's/#.*//' "$file" | awk '
            $1 == "deb" {
                i = 2
                if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                if (i + 1 <= NF) print $i, $(i + 1)
            }'
    done
    for file in /etc/apt/sources.list.d/*.sources; do
        [ -f "$file" ] || continue
        # deb822 stanzas separated by blank lines; fields Types, URIs, Suites, Enabled.
        awk '
            function flush(   nu, ns, u, s, us, ss) {
                if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
                    nu = split(uris, us, " "); ns = split(suites, ss, " ")
                    for (u = 1; u <= nu; u++) for (s = 1; s <= ns; s++) print us[u], ss[s]
                }
                types = ""; uris = ""; suites = ""; enabled = ""; field = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            /^[A-Za-z-]+:/ {
                field = tolower($0); sub(/:.*/, "", field)
                value = $0; sub(/^[^:]*:[ \t]*/, "", value)
                if (field == "types") types = value
                else if (field == "uris") uris = value
                else if (field == "suites") suites = value
                else if (field == "enabled") enabled = value
                next
            }
            /^[ \t]/ {   # continuation line of a multi-line field
                value = $0; sub(/^[ \t]+/, "", value)
                if (field == "uris") uris = uris " " value
                else if (field == "suites") suites = suites " " value
                next
            }
            END { flush() }' "$file"
    done
}

# The Debian mirror: the first entry whose suite is a Debian release itself (a codename or
# stable/testing/unstable, not -updates, -security, -backports), else the first plain-release entry
# of a URI ending in /debian. Suite: that release; without one, a release named in another entry
# (bookworm-updates -> bookworm), else bookworm. Prints "MIRROR SUITE" (MIRROR may be empty).
DEBIAN_RELEASES=" buzz rex bo hamm slink potato woody sarge etch lenny squeeze wheezy jessie stretch
 buster bullseye bookworm trixie forky duke sid oldoldstable oldstable stable testing unstable "
pick_mirror_and_suite() {
    local entries uri suite base mirror="" release="" fallback=""
    entries=$(apt_source_entries | sed 's/\r$//')
    while read -r uri suite; do
        case "$uri" in http://* | https://* | file:/*) ;; *) continue ;; esac
        base=${suite%%[-/]*}
        case "$DEBIAN_RELEASES" in *" $base "*) [ -n "$fallback" ] || fallback=$base ;; esac
        case "$DEBIAN_RELEASES" in
            *" $suite "*) mirror=$uri release=$suite; break ;;
        esac
    done <<<"$entries"
    if [ -z "$mirror" ]; then
        while read -r uri suite; do
            case "$uri" in http://*/debian | http://*/debian/ | https://*/debian | https://*/debian/ | file:/*/debian | file:/*/debian/) ;; *) continue ;; esac
            case "$suite" in */* | *-*) continue ;; esac
            mirror=$uri release=$suite
            break
        done <<<"$entries"
    fi
    if [ -z "$mirror" ]; then
        # Only derived suites (e.g. bookworm-updates) name the archive: use its URI.
        while read -r uri suite; do
            case "$uri" in http://*/debian | http://*/debian/ | https://*/debian | https://*/debian/) mirror=$uri; break ;; esac
        done <<<"$entries"
    fi
    echo "${mirror%/} ${release:-${fallback:-bookworm}}"
}

FOUND=$(pick_mirror_and_suite)
FOUND_MIRROR=${FOUND% *}
FOUND_SUITE=${FOUND##* }
MIRROR=${AGENTD_DEBIAN_MIRROR:-$FOUND_MIRROR}
SUITE=${AGENTD_DEBIAN_SUITE:-${FOUND_SUITE:-bookworm}}
if [ -z "$MIRROR" ]; then
    echo "debian.sh: no Debian mirror in the apt sources; set AGENTD_DEBIAN_MIRROR" >&2
    exit 1
fi
if [ "$PRINT_SOURCE" = 1 ]; then
    echo "$MIRROR $SUITE"
    exit 0
fi

# A changed recipe (a package added, say) rebuilds an existing image.
RECIPE=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
if [ "$FORCE" = 0 ] &&
    [ "$(docker image inspect -f '{{index .Config.Labels "dev.agentd.recipe-sha256"}}' "$IMAGE" 2>/dev/null)" = "$RECIPE" ]; then
    say "$IMAGE exists and was made by this recipe, skipping (--force to rebuild)"
    exit 0
fi

if [ -n "${AGENTD_DEBIAN_MIRROR:-}${AGENTD_DEBIAN_SUITE:-}" ]; then
    say "suite $SUITE from $MIRROR (AGENTD_DEBIAN_MIRROR/AGENTD_DEBIAN_SUITE)"
else
    say "suite $SUITE from the mirror in the machine's apt sources ($MIRROR)"
fi

missing=()
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} with apt-get"
    if ! DEBIAN_FRONTEND=noninteractive apt-get -q install -y "${missing[@]}" >/dev/null; then
        apt-get -q update >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get -q install -y "${missing[@]}" >/dev/null
    fi
fi

# On the root filesystem rather than a possible tmpfs /tmp: the tree is a few hundred MB and needs
# device nodes.
WORK=$(mktemp -d "${AGENTD_IMAGES_TMPDIR:-/var/tmp}/agentd-base-debian.XXXXXX")
ROOT="$WORK/rootfs"
cleanup() {
    # debootstrap mounts proc/sys (and may bind /dev nodes) inside the target: unmount whatever is
    # still mounted under it, deepest first, before removing the tree, never crossing a mount.
    local mnt
    while read -r mnt; do
        umount -l "$mnt" 2>/dev/null || true
    done < <(awk -v root="$WORK/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT

KEYRING=()
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] && KEYRING=(--keyring=/usr/share/keyrings/debian-archive-keyring.gpg)

# python-is-python3: `python` runs python3, as scripts and test suites expect.
PACKAGES=python3,python-is-python3
say "debootstrap --variant=minbase --include=$PACKAGES $SUITE (log: $WORK/debootstrap.log while it runs)"
start=$(date +%s)
if ! debootstrap --variant=minbase --include=$PACKAGES "${KEYRING[@]}" "$SUITE" "$ROOT" "$MIRROR" \
    >"$WORK/debootstrap.log" 2>&1; then
    tail -n 40 "$WORK/debootstrap.log" >&2
    [ -f "$ROOT/debootstrap/debootstrap.log" ] && tail -n 40 "$ROOT/debootstrap/debootstrap.log" >&2
    echo "debian.sh: debootstrap failed" >&2
    exit 1
fi
say "debootstrap done in $(($(date +%s) - start)) s"

# Trim what a container does not need: downloaded packages, package lists, logs.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/lib/apt/lists/* \
    "$ROOT"/debootstrap
find "$ROOT/var/log" -type f -delete
# Documentation, manuals and translations (~50 MB of 160), kept out of later installs too; the
# copyright files stay.
rm -rf "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/*
find "$ROOT/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/agentd-nodoc" <<'EOF'
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
EOF
# Nothing of this machine's network identity: the engine provides both files at run time.
: >"$ROOT/etc/resolv.conf"
echo localhost >"$ROOT/etc/hostname"
mkdir -p "$ROOT/workspace" "$ROOT/var/lib/apt/lists/partial"
chmod 0755 "$ROOT/workspace"
# Whatever debootstrap left mounted is not part of the image.
while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done \
    < <(awk -v root="$ROOT/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
PYVER=$(chroot "$ROOT" python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || echo unknown)

OLD_ID=$(docker image inspect -f '{{.Id}}' "$IMAGE" 2>/dev/null || true)
say "docker import -> $IMAGE (python3 $PYVER)"
tar -C "$ROOT" --numeric-owner -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'WORKDIR /workspace' \
    --change 'CMD ["/bin/bash"]' \
    --change 'LABEL org.opencontainers.image.title="agentd-base-debian"' \
    --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase with python3 (also as python), made by debootstrap\"" \
    --change 'LABEL dev.agentd.base="debian"' \
    --change "LABEL dev.agentd.debian-suite=\"$SUITE\"" \
    --change "LABEL dev.agentd.recipe-sha256=\"$RECIPE\"" \
    - "$IMAGE" >/dev/null
# A rebuilt tag leaves the previous image dangling: drop it (kept while images or containers use it).
if [ -n "$OLD_ID" ] && [ "$OLD_ID" != "$(docker image inspect -f '{{.Id}}' "$IMAGE")" ]; then
    docker rmi "$OLD_ID" >/dev/null 2>&1 || true
fi
say "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes) in $(($(date +%s) - start)) s"
