#!/usr/bin/env bash
# Build, once, a server tree the tests run live through chroot: Debian packages installed
# with debootstrap (--variant=minbase) from the machine's own Debian mirror (read from its
# apt sources; debootstrap itself fetched from there when it is not installed). Reused
# while it is complete (TREE/.complete holds the server's --version). Where it cannot be
# built (no registry, not root), it says why and exits 1: the tests of that server skip.
# Called by scripts/mysql_tree.sh and scripts/mariadb_tree.sh:
#   scripts/debootstrap_tree.sh NAME TREE SUITE PACKAGES DAEMON WHAT [hosts]
# NAME prefixes its lines, PACKAGES is comma-separated, DAEMON the binary under
# /usr/sbin that proves the tree, WHAT names the tests that skip; "hosts" copies the
# host's /etc/hosts in (mariadb-install-db resolves the host name).
set -euo pipefail
NAME="$1"; TREE="$2"; SUITE="$3"; PACKAGES="$4"; DAEMON="$5"; WHAT="$6"; HOSTS="${7:-}"

if [ -e "$TREE/.complete" ] && [ -x "$TREE/usr/sbin/$DAEMON" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "$NAME: not root: cannot debootstrap or chroot; $WHAT will skip" >&2
    exit 1
fi

mirror() {
    # the first Debian mirror (not the security one) of the machine's apt sources
    { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
      grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
    } | grep -v -- '-security' | grep '/debian/\?$' | head -1
}
MIRROR="$(mirror || true)"
if [ -z "$MIRROR" ]; then
    echo "$NAME: no Debian mirror in the apt sources; $WHAT will skip" >&2
    exit 1
fi

DEBOOTSTRAP="$(command -v debootstrap || true)"
if [ -z "$DEBOOTSTRAP" ]; then
    TOOL="$(mktemp -d)"
    (cd "$TOOL" && apt-get download debootstrap >/dev/null 2>&1) || {
        echo "$NAME: cannot fetch debootstrap from $MIRROR; $WHAT will skip" >&2
        exit 1; }
    dpkg -x "$TOOL"/debootstrap_*.deb "$TOOL/root"
    export DEBOOTSTRAP_DIR="$TOOL/root/usr/share/debootstrap"
    DEBOOTSTRAP="$TOOL/root/usr/sbin/debootstrap"
fi

# the packages downloaded are kept for the next build on this machine (a fresh clone, CI)
CACHE="${MYSQLBACKUP_DEB_CACHE:-/var/cache/mysqlbackup/debs}/$SUITE"
mkdir -p "$CACHE"
# a mirror that stalls must not hold the test run: past the limit the build gives up
LIMIT="${MYSQLBACKUP_TREE_TIMEOUT:-900}"
unmount_under() {
    # what an interrupted debootstrap left mounted inside the tree (proc, sys, a bound
    # /dev), deepest first, so that removing the tree never reaches the host's own
    local root
    root="$(realpath -m "$1")"
    awk -v r="$root/" 'index($2 "/", r) == 1 {print $2}' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" || true; done
}
echo "$NAME: building $TREE from $MIRROR (Debian $SUITE: ${PACKAGES//,/, })" >&2
unmount_under "$TREE"
rm -rf --one-file-system "$TREE"
mkdir -p "$(dirname "$TREE")"
if ! timeout "$LIMIT" "$DEBOOTSTRAP" --variant=minbase --cache-dir="$CACHE" \
        --include="$PACKAGES" "$SUITE" "$TREE" "$MIRROR" > "$TREE.log" 2>&1; then
    echo "$NAME: debootstrap failed or took over ${LIMIT}s (see $TREE.log); $WHAT will skip" >&2
    tail -3 "$TREE.log" >&2
    unmount_under "$TREE"
    exit 1
fi
if [ "$HOSTS" = "hosts" ]; then
    cp /etc/hosts "$TREE/etc/hosts"
fi
chroot "$TREE" "/usr/sbin/$DAEMON" --version > "$TREE/.complete"
echo "$NAME: $(cat "$TREE/.complete")" >&2
