#!/usr/bin/env bash
# Set up a fresh machine: MariaDB server/client (and mariadb-backup), a Java 17 runtime and
# Chromium (headless: the docs site's test), Node's npm (zongji) and promtool (Prometheus's,
# for the alert rules) from Debian when missing, a virtualenv in .venv
# with the package and its test and docs extras. Safe to re-run. It apt-installs packages:
# for a throwaway machine or CI (on a MySQL host, mariadb-server would replace MySQL's packages).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
    echo "setup: installing mariadb-server and mariadb-client" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mariadb-server mariadb-client >/dev/null
    # the package may start a system server; the tests never use it and start their own
fi

if ! command -v mariadb-backup >/dev/null 2>&1 && ! command -v mariabackup >/dev/null 2>&1; then
    echo "setup: installing mariadb-backup (physical base backups)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq mariadb-backup >/dev/null
fi

if ! command -v java >/dev/null 2>&1; then
    echo "setup: installing a Java 17 runtime for Spark" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

if ! command -v chromium >/dev/null 2>&1; then
    echo "setup: installing chromium (headless: tests/test_docs.py opens the docs site)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
fi

if ! command -v promtool >/dev/null 2>&1; then
    echo "setup: installing prometheus (its promtool checks contrib/prometheus's rules)" >&2
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    # only promtool is used: the package's server is kept from starting during the install
    POLICY=/usr/sbin/policy-rc.d
    if [ ! -e "$POLICY" ]; then
        printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
        $SUDO chmod +x "$POLICY"
        trap '$SUDO rm -f "$POLICY"' EXIT
    fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        prometheus >/dev/null || echo "setup: no promtool: the alert rules' test will skip" >&2
    if [ "$(trap -p EXIT)" ]; then $SUDO rm -f "$POLICY"; trap - EXIT; fi
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test,docs]"
# the Spark driver's class-data archive (replay/spark/jvm.py: about 2 s off each
# local Spark start), built once per Java and PySpark; without it Spark starts as ever
.venv/bin/python -m replay.spark.jvm || echo "setup: Spark starts without its class cache" >&2

# the live MySQL server of the tests (Debian sid's, in .mysql/tree, built once); where it
# cannot be built, the reason is printed and the MySQL tests skip saying so
scripts/mysql_tree.sh || echo "setup: no live MySQL server: its tests will skip" >&2
# the live MariaDB 11.8 LTS server (Debian trixie's, in .mariadb/tree, built once): the
# server new installs run, beside the host's 10.11; where it cannot be built, its tests skip
scripts/mariadb_tree.sh || echo "setup: no live MariaDB 11.8 server: its tests will skip" >&2
# zongji (a Node binlog client) for serve's client tests, pinned with its MySQL driver
# (they run its queries; zongji asks for mysql2 ^3.22.5, and a new mysql2 changed the
# login: 3.26 fetches caching_sha2_password's RSA key over clear text only when asked):
# Debian's nodejs and npm when missing; where npm cannot install it, those tests skip
ZONGJI=0.9.0
MYSQL2=3.26.1
if ! command -v npm >/dev/null; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq nodejs npm >/dev/null \
        || echo "setup: no npm: the zongji tests will skip" >&2
fi
if command -v npm >/dev/null && ! { grep -qs "\"version\": \"$ZONGJI\"" \
        .node/node_modules/@vlasky/zongji/package.json && grep -qs "\"version\": \"$MYSQL2\"" \
        .node/node_modules/mysql2/package.json; }; then
    npm install --prefix .node --no-audit --no-fund --silent --save-exact \
        "@vlasky/zongji@$ZONGJI" "mysql2@$MYSQL2" \
        || echo "setup: @vlasky/zongji not installed: the zongji tests will skip" >&2
fi
