#!/usr/bin/env bash
# Set up everything needed and run the whole test suite (real MariaDB servers it starts itself).
# The tests run in MYSQLBACKUP_TEST_WORKERS processes (default 2, pytest-xdist), a test file
# at a time each (--dist loadfile: a file's module fixtures are made once); 1: one process.
# Arguments go to pytest (-m unit: the unit tier; -n N: that many processes).
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh || exit 1
# the project's bytecode, written once: the hundreds of CLI processes the tests start import
# it (under PYTHONDONTWRITEBYTECODE each would compile it again, 0.2 s of CPU apiece)
.venv/bin/python -m compileall -q mysqlbackup replay > /dev/null || exit 1
workers=${MYSQLBACKUP_TEST_WORKERS:-2}
parallel=()
if [ "$workers" != 1 ] && ! printf '%s\n' "$@" | grep -qE '^(-n|--numprocesses)'; then
    parallel=(-n "$workers" --dist loadfile)
fi
.venv/bin/python -m pytest "${parallel[@]}" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests: failing" >&2
    exit 1
fi
exit "$rc"
