"""What newer servers bring, read right or refused loudly (pure): versions (MySQL's
calendar numbers, MariaDB 11.x/12.x, the "5.5.5-" a MariaDB server announces itself
with), a MariaDB 12.3 primary whose binlog is in InnoDB refused at connect, an event of
an unknown type inside a transaction refused by the change table, never skipped."""

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.events import is_mariadb_version, parse_version
from mysqlbackup.errors import SourceError
from mysqlbackup.source.client import ServerInfo
from mysqlbackup.source.spec import SourceSpec
from replay.job.decoding.changes import ChangeDecodeError, iter_changes
from replay.job.decoding.transaction import Transaction
from tests.helpers import make_event
from tests.test_statement_steps import fde


def test_versions_of_every_numbering_read_right():
    assert parse_version("26.10.0") == (26, 10, 0)
    assert parse_version("28.4.1-log") == (28, 4, 1)
    assert parse_version("9.7.4-2") == (9, 7, 4)
    assert parse_version("12.3.2-MariaDB") == (12, 3, 2)
    assert parse_version("11.8.9-MariaDB-0+deb13u1 from Debian-log") == (11, 8, 9)
    assert parse_version("5.5.5-10.11.6-MariaDB-0+deb12u1") == (10, 11, 6)
    assert parse_version("5.5.5-12.3.2-MariaDB") >= (11, 4, 0)
    assert parse_version("8.0.40") < parse_version("26.10.0") < parse_version("28.4.1")
    assert parse_version("5.6.4-m7-debug-log") == (5, 6, 4)
    assert is_mariadb_version("5.5.5-12.3.2-MariaDB") and not is_mariadb_version("26.10.0")


def test_a_primary_whose_binlog_is_in_innodb_is_refused_saying_why():
    from types import SimpleNamespace

    from mysqlbackup.stream.daemon import _source_changed
    info = ServerInfo("12.3.2-MariaDB", 1, None, True, "CRC32", {}, binlog_engine="InnoDB")
    opts = SimpleNamespace(source=SourceSpec("db1", 3306, "repl", "pw"))
    with pytest.raises(SourceError, match=r"^the source db1:3306 keeps its binlog inside "
                       r"InnoDB \(binlog_storage_engine=innodb, MariaDB 12\.3\+\): such a "
                       r"server has no semi-sync, so no commit can wait for this backup's "
                       r"fsync and the no-loss promise cannot hold"):
        _source_changed(info, None, opts)
    files = ServerInfo("12.3.2-MariaDB", 1, None, True, "CRC32", {}, binlog_engine="binlog")
    assert _source_changed(files, None, opts) is False


def test_an_unknown_event_in_a_transaction_stops_the_change_table():
    trx = Transaction(file="binlog.000003", start=400, end=600, gtid="0-1-9",
                      events=[make_event(ev.MARIA_GTID, bytes(13), 0),
                              make_event(172, bytes(30), 0)], event_starts=[400, 436])
    with pytest.raises(ChangeDecodeError, match=r"^binlog\.000003:436: an event of type 172, "
                       r"which --parquet does not know .* refused, never skipped$"):
        list(iter_changes(trx, fde(), True))
