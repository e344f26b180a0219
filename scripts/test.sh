#!/usr/bin/env bash
# Set up everything needed and run the whole test suite (real MariaDB servers it starts itself).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
