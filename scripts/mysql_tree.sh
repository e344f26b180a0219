#!/usr/bin/env bash
# Build, once, the MySQL server the tests run live: Debian's unstable suite has
# mysql-server-core and mysql-client (this Debian release ships none), installed with
# debootstrap into .mysql/tree (git-ignored; reused while it is complete). The mirror is
# the machine's own Debian mirror, read from its apt sources. Tests run
# `chroot .mysql/tree /usr/sbin/mysqld ...` (mysqlbackup/sandbox/mysql.py); where this
# cannot be built (no registry, not root), it says why and the MySQL tests skip saying so.
# Usage: scripts/mysql_tree.sh [DIR]   (default: .mysql/tree beside this script's folder)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE="${1:-${MYSQLBACKUP_MYSQL_TREE:-.mysql/tree}}"

exec scripts/debootstrap_tree.sh mysql_tree "$TREE" sid mysql-server-core,mysql-client \
    mysqld "the live MySQL tests"
