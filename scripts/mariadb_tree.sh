#!/usr/bin/env bash
# Build, once, the MariaDB 11.8 LTS server the tests run live beside the host's 10.11:
# Debian trixie's mariadb-server, mariadb-client and mariadb-backup, installed with
# debootstrap into .mariadb/tree (git-ignored; reused while it is complete), the host's
# /etc/hosts copied in (mariadb-install-db resolves the host name). The mirror is the
# machine's own Debian mirror, read from its apt sources. Tests run
# `chroot .mariadb/tree /usr/sbin/mariadbd ...` (mysqlbackup/sandbox/tree.py); where this
# cannot be built (no registry, not root), it says why and the 11.8 tests skip saying so.
# Usage: scripts/mariadb_tree.sh [DIR]   (default: .mariadb/tree beside this script's folder)
set -euo pipefail
cd "$(dirname "$0")/.."
TREE="${1:-${MYSQLBACKUP_MARIADB_TREE:-.mariadb/tree}}"
SUITE="${MYSQLBACKUP_MARIADB_SUITE:-trixie}"

exec scripts/debootstrap_tree.sh mariadb_tree "$TREE" "$SUITE" \
    mariadb-server,mariadb-client,mariadb-backup mariadbd "the MariaDB 11.8 tests" hosts
