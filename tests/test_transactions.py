"""Transaction boundaries on real binlog files."""

from mysqlbackup.binlog.transactions import TrxTracker, classify_sql
from tests.helpers import file_events


def count(path, check_log_pos=True):
    tracker = TrxTracker()
    for event in file_events(path, check_log_pos):
        tracker.feed(event)
    return tracker


def test_classify_sql():
    assert classify_sql("BEGIN") == "begin"
    assert classify_sql("XA START 'x'") == "begin"
    assert classify_sql("COMMIT") == "commit"
    assert classify_sql("ROLLBACK") == "commit"
    assert classify_sql("ROLLBACK TO SAVEPOINT s") == "other"
    assert classify_sql("CREATE TABLE t (a int)") == "other"


def test_mariadb_file_counts_and_gtids(shared_binlog):
    t = count(shared_binlog("rust_mysql_common/mariadb-bin.000001"))
    assert t.transactions == 2 and t.at_boundary
    assert t.gtids.flavor == "mariadb" and not t.gtids.is_empty()


def test_mysql_57_gtid_file(shared_binlog):
    t = count(shared_binlog("mysql-binlog-connector-rust/mysql-bin.000080"))
    assert t.transactions == 10 and t.at_boundary
    assert t.gtids.flavor == "mysql"
    (sid, intervals), = t.gtids.sids.items()
    assert intervals[-1][1] - intervals[0][0] >= 10


def test_gh_ost_file(shared_binlog):
    t = count(shared_binlog("gh-ost/mysql-bin.000066"))
    assert t.transactions == 13 and t.at_boundary


def test_savepoint_file_stays_one_transaction(shared_binlog):
    # a relay log (master positions): BEGIN, SAVEPOINT, ROLLBACK TO ..., XID is one group
    t = count(shared_binlog("rust_mysql_common/binlog_savepoint.000001"), check_log_pos=False)
    assert t.transactions == 1 and t.at_boundary
