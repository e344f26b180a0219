"""``inspect`` over every real binlog in ../shared/binlogs, against its MANIFEST.md."""

import json
import os
import re

import pytest

from mysqlbackup.binlog.inspect import inspect_bytes
from tests.conftest import SHARED_BINLOGS
from tests.helpers import read, run_cli

# Where MANIFEST.md's heuristic count differs from the transaction boundaries the
# tool uses everywhere (backup, archive, replay), with the reason.
MANIFEST_DIFFERS = {
    "rust_mysql_common/binlog_savepoint.000001": (
        12, 1, "one BEGIN..XID with SAVEPOINT and ROLLBACK TO inside; the MANIFEST heuristic "
               "ends a transaction at 'ROLLBACK TO'"),
}
# Damaged on purpose upstream: inspect must name the problem and its offset.
EXPECTED_ERRORS = {
    "mysql-binlog-connector-rust/non-binlog": (0, "not a binlog file"),
    "rust_mysql_common/binlog_truncated_event.000001": (4, "torn event"),
    "rust_mysql_common/binlog_truncated_prev_gtid_event.000001": (120, "torn event"),
    "rust_mysql_common/corrupt-relay-bin.000624": (91204, "QUERY event lengths overflow"),
}


def manifest_rows():
    rows = []
    with open(os.path.join(SHARED_BINLOGS, "MANIFEST.md"), encoding="utf-8") as f:
        for line in f:
            cols = [c.strip() for c in line.split("|")]
            if len(cols) > 2 and "/" in cols[1] and not cols[1].startswith("path"):
                m = re.search(r"(\d+) ev / (\d+) trx", line)
                rows.append((cols[1], (int(m[1]), int(m[2])) if m else None))
    return rows


HAVE_CORPUS = os.path.isdir(SHARED_BINLOGS)
pytestmark = pytest.mark.skipif(
    not HAVE_CORPUS, reason=f"needs the real-binlog corpus {SHARED_BINLOGS} (../shared/binlogs "
    f"beside the checkout; not part of a clone of the repository)")
ROWS = manifest_rows() if HAVE_CORPUS else []


def test_manifest_lists_every_file():
    listed = {path for path, _ in ROWS}
    on_disk = {os.path.relpath(os.path.join(d, f), SHARED_BINLOGS)
               for d, _, files in os.walk(SHARED_BINLOGS) for f in files
               if f != "MANIFEST.md" and not f.endswith(".txt")}
    assert on_disk == listed


@pytest.mark.parametrize("path,counts", ROWS, ids=[p for p, _ in ROWS])
def test_counts_match_the_manifest(path, counts):
    report = inspect_bytes(read(os.path.join(SHARED_BINLOGS, path)), path)
    if path in MANIFEST_DIFFERS:
        counts = MANIFEST_DIFFERS[path][:2]
    if counts is not None:
        assert (report["events"], report["transactions"]) == counts
    if path in EXPECTED_ERRORS:
        offset, text = EXPECTED_ERRORS[path]
        assert report["error"]["offset"] == offset and text in report["error"]["message"]
    else:
        assert report["error"] is None, report["error"]


@pytest.mark.server
def test_cli_over_every_file_names_each_problem():
    paths = [os.path.join(SHARED_BINLOGS, p) for p, _ in ROWS]
    result = run_cli("inspect", *paths)
    assert result.returncode == 1
    out = result.stdout
    assert f"{paths[4]}: not a binlog file (bad magic bytes)" in out  # one clear line
    assert "ERROR at offset 91204: QUERY event lengths overflow" in out
    assert "ERROR at offset 120: torn event" in out
    assert "binlog_truncated_event.000001: torn event: 10 bytes left, header needs 19 " \
           "(at offset 4)" in out
    assert out.count("ERROR at offset") == 2


@pytest.mark.server
def test_cli_json_of_good_files_exits_0():
    good = [os.path.join(SHARED_BINLOGS, p) for p, _ in ROWS if p not in EXPECTED_ERRORS]
    result = run_cli("inspect", "--json", *good)
    assert result.returncode == 0, result.stdout[-2000:]
    reports = json.loads(result.stdout)
    tagged = [r for r in reports if r["file"].endswith("GTID_TAG.000001")][0]
    assert tagged["server_version"] == "9.6.0" and tagged["event_types"]["GTID_TAGGED"] == 1
    compressed = [r for r in reports if r["file"].endswith("transaction_compression.000001")][0]
    assert compressed["event_types"]["TRANSACTION_PAYLOAD"] == 1
