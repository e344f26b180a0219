#!/usr/bin/env bash
# Set up the machine, then the whole drill on the embedded default (scripts/demo.py): a
# throwaway MariaDB primary, `mysqlbackup stream` as its semi-sync replica into a local
# directory and a file:// archive, `mysqlbackup base`, traffic, an accidental DROP TABLE,
# its GTID found in `mysqlbackup replay --sql` output, `mysqlbackup status` and a byte-for-byte
# comparison of the files, `mysqlbackup restore --stop-before-gtid` (--dry-run first) into a
# second throwaway server, and CHECKSUM TABLE of both. Exits non-zero when anything differs.
# `scripts/demo.sh --mysql`: the same drill on MySQL (the tree scripts/mysql_tree.sh builds).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
