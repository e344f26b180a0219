#!/usr/bin/env bash
# Build, once, the MariaDB 11.8 LTS server the tests run live beside the host's 10.11:
# Debian trixie's mariadb-server, mariadb-client and mariadb-backup, installed with
# debootstrap into .mariadb/tree (git-ignored; reused while it is complete), the host's
# /etc/hosts copied in (mariadb-install-db resolves the host name). The mirror is the
# machine's own Debian mirror, read from its apt sources. Tests run
# `chroot .mariadb/tree /usr/sbin/mariadbd ...` (mysqlbackup/sandbox_tree.py); where this
# cannot be built (no registry, not root), it says why and the 11.8 tests skip saying so.
# Usage: scripts/mariadb_tree.sh [DIR]   (default: .mariadb/tree beside this script's folder)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE="${1:-${MYSQLBACKUP_MARIADB_TREE:-.mariadb/tree}}"
SUITE="${MYSQLBACKUP_MARIADB_SUITE:-trixie}"

if [ -e "$TREE/.complete" ] && [ -x "$TREE/usr/sbin/mariadbd" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "mariadb_tree: not root: cannot debootstrap or chroot; the MariaDB 11.8 tests will skip" >&2
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
    echo "mariadb_tree: no Debian mirror in the apt sources; the MariaDB 11.8 tests will skip" >&2
    exit 1
fi

DEBOOTSTRAP="$(command -v debootstrap || true)"
if [ -z "$DEBOOTSTRAP" ]; then
    TOOL="$(mktemp -d)"
    (cd "$TOOL" && apt-get download debootstrap >/dev/null 2>&1) || {
        echo "mariadb_tree: cannot fetch debootstrap from $MIRROR; the MariaDB 11.8 tests will skip" >&2
        exit 1; }
    dpkg -x "$TOOL"/debootstrap_*.deb "$TOOL/root"
    export DEBOOTSTRAP_DIR="$TOOL/root/usr/share/debootstrap"
    DEBOOTSTRAP="$TOOL/root/usr/sbin/debootstrap"
fi

echo "mariadb_tree: building $TREE from $MIRROR (Debian $SUITE: mariadb-server, mariadb-client, mariadb-backup)" >&2
rm -rf "$TREE"
mkdir -p "$(dirname "$TREE")"
if ! "$DEBOOTSTRAP" --variant=minbase --include=mariadb-server,mariadb-client,mariadb-backup \
        "$SUITE" "$TREE" "$MIRROR" > "$TREE.log" 2>&1; then
    echo "mariadb_tree: debootstrap failed (see $TREE.log); the MariaDB 11.8 tests will skip" >&2
    tail -3 "$TREE.log" >&2
    exit 1
fi
cp /etc/hosts "$TREE/etc/hosts"
chroot "$TREE" /usr/sbin/mariadbd --version > "$TREE/.complete"
echo "mariadb_tree: $(cat "$TREE/.complete")" >&2
