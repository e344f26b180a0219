#!/usr/bin/env bash
# Build, once, the MySQL server the tests run live: Debian's unstable suite has
# mysql-server-core and mysql-client (this Debian release ships none), installed with
# debootstrap into .mysql/tree (git-ignored; reused while it is complete). The mirror is
# the machine's own Debian mirror, read from its apt sources. Tests run
# `chroot .mysql/tree /usr/sbin/mysqld ...` (mysqlbackup/sandbox_mysql.py); where this
# cannot be built (no registry, not root), it says why and the MySQL tests skip saying so.
# Usage: scripts/mysql_tree.sh [DIR]   (default: .mysql/tree beside this script's folder)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE="${1:-${MYSQLBACKUP_MYSQL_TREE:-.mysql/tree}}"

if [ -e "$TREE/.complete" ] && [ -x "$TREE/usr/sbin/mysqld" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "mysql_tree: not root: cannot debootstrap or chroot; the live MySQL tests will skip" >&2
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
    echo "mysql_tree: no Debian mirror in the apt sources; the live MySQL tests will skip" >&2
    exit 1
fi

DEBOOTSTRAP="$(command -v debootstrap || true)"
if [ -z "$DEBOOTSTRAP" ]; then
    TOOL="$(mktemp -d)"
    (cd "$TOOL" && apt-get download debootstrap >/dev/null 2>&1) || {
        echo "mysql_tree: cannot fetch debootstrap from $MIRROR; the live MySQL tests will skip" >&2
        exit 1; }
    dpkg -x "$TOOL"/debootstrap_*.deb "$TOOL/root"
    export DEBOOTSTRAP_DIR="$TOOL/root/usr/share/debootstrap"
    DEBOOTSTRAP="$TOOL/root/usr/sbin/debootstrap"
fi

echo "mysql_tree: building $TREE from $MIRROR (Debian sid: mysql-server-core, mysql-client)" >&2
rm -rf "$TREE"
mkdir -p "$(dirname "$TREE")"
if ! "$DEBOOTSTRAP" --variant=minbase --include=mysql-server-core,mysql-client sid "$TREE" \
        "$MIRROR" > "$TREE.log" 2>&1; then
    echo "mysql_tree: debootstrap failed (see $TREE.log); the live MySQL tests will skip" >&2
    tail -3 "$TREE.log" >&2
    exit 1
fi
chroot "$TREE" /usr/sbin/mysqld --version > "$TREE/.complete"
echo "mysql_tree: $(cat "$TREE/.complete")" >&2
