#!/usr/bin/env bash
# Set up and run the main job on the embedded default: a throwaway local MariaDB primary,
# `mysqlbackup stream` as its semi-sync replica into a local directory, some transactions,
# then `mysqlbackup status` and a byte-for-byte comparison with the server's own files.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
