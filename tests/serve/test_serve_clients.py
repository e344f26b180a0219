"""``serve`` for the binlog clients that are not replicas, each run against serve and
against the live primary of the same archive (MariaDB 10.11; MySQL 9.7 and MariaDB
11.8 have modules of their own): ``mariadb-binlog --read-from-remote-server`` raw and
decoded, python-mysql-replication (the version setup.cfg pins) and zongji (Node). The
primary (conftest.py) wrote three files, the last one active."""


import pytest

from tests.helpers import wait_for
from tests.serve.clients import (Endpoint, files_in, pmr_rows, read_decoded, read_raw,
                                 why_no_zongji, without_in_use, zongji_rows)
from tests.serve.world import PASSWORD, growing_archive, serve

USER = "mysqlbackup_serve"


def ends(handle):
    return Endpoint.of_serve(handle, USER, PASSWORD)


def test_mariadb_binlog_raw_gets_the_archived_files_and_ends(primary, binlog_dir, archive,
                                                              tmp_path):
    """``--raw --to-last-log``: the files byte for byte what the primary sends (its own
    files, the active one's in-use flag clear as a dump sends it), and the reader ends
    by itself (a non-blocking dump: EOF once it has everything)."""
    server, _ = primary
    with serve(archive) as handle:
        served = read_raw("mariadb-binlog", ends(handle), "binlog.000001", tmp_path / "serve")
    live = read_raw("mariadb-binlog", Endpoint.of_server(server), "binlog.000001",
                    tmp_path / "primary")
    assert list(served) == ["binlog.000001", "binlog.000002", "binlog.000003"]
    assert served == live
    archived = files_in(binlog_dir)
    assert served["binlog.000001"] == archived["binlog.000001"]
    assert served["binlog.000003"] == without_in_use(archived["binlog.000003"])
    assert archived["binlog.000003"] != served["binlog.000003"]  # the flag was set


def test_mariadb_binlog_decoded_as_from_the_primary(primary, archive, tmp_path):
    server, _ = primary
    with serve(archive) as handle:
        served = read_decoded("mariadb-binlog", ends(handle), "binlog.000001", tmp_path / "s")
    live = read_decoded("mariadb-binlog", Endpoint.of_server(server), "binlog.000001",
                        tmp_path / "p")
    assert "### INSERT INTO `d`.`t`" in served and "DROP TABLE" in served
    assert served == live


def test_mariadb_binlog_stop_never_follows_the_archive(binlog_dir, tmp_path):
    url, rest, cut, size = growing_archive(binlog_dir, tmp_path)
    out = tmp_path / "out"
    with serve(url) as handle:
        reader = read_raw("mariadb-binlog", ends(handle), "binlog.000001", out, follow=True)
        try:
            newest = out / "binlog.000003"

            def grown_to(length):
                return reader.poll() is not None or (
                    newest.exists() and newest.stat().st_size == length)
            wait_for(lambda: grown_to(cut), what="the archived part of file 3")
            assert reader.poll() is None, reader.stderr.read()  # it waits, as on a primary
            rest()
            wait_for(lambda: grown_to(size), timeout=30, what="the newly archived transactions")
            assert reader.poll() is None, reader.stderr.read()
        finally:
            reader.kill()
            reader.wait()
    assert newest.read_bytes() == without_in_use((binlog_dir / "binlog.000003").read_bytes())


# -- python-mysql-replication -----------------------------------------------------------

def test_python_mysql_replication_reads_what_the_primary_gives(primary, archive):
    """From the start (its MariaDB dump by file:position asks for the first file), and
    from a GTID; blocking=False ends by itself; column names and values equal."""
    server, gtids = primary
    live = Endpoint.of_server(server)
    with serve(archive) as handle:
        from_file = pmr_rows(ends(handle), True, log_file="binlog.000001", log_pos=4)
        from_gtid = pmr_rows(ends(handle), True, auto_position=gtids[1])
    assert from_file == pmr_rows(live, True, log_file="binlog.000001", log_pos=4)
    assert from_gtid == pmr_rows(live, True, auto_position=gtids[1])
    assert ("insert", "d", "t", {"id": 1, "v": 1}) in from_file
    assert ("update", "d", "t", {"before": {"id": 1, "v": 1}, "after": {"id": 1, "v": 11}}) \
        in from_gtid
    assert ("insert", "d", "t", {"id": 1, "v": 1}) not in from_gtid


def test_python_mysql_replication_blocking_follows_the_archive(binlog_dir, primary, tmp_path):
    server, gtids = primary
    url, rest, _, _ = growing_archive(binlog_dir, tmp_path)
    whole = pmr_rows(Endpoint.of_server(server), True, log_file="binlog.000001", log_pos=4)
    with serve(url) as handle:
        before = pmr_rows(ends(handle), True, log_file="binlog.000001", log_pos=4)
        assert len(before) < len(whole)
        rest()
        after = pmr_rows(ends(handle), True, blocking=True, limit=len(whole),
                         log_file="binlog.000001", log_pos=4)
    assert after == whole


def test_the_queries_of_binlog_clients_get_the_archives_answers(primary, archive):
    import pymysql
    server, gtids = primary
    with serve(archive) as handle:
        conn = pymysql.connect(host=handle.host, port=handle.port, user=USER,
                               password=PASSWORD, database="information_schema")
        try:
            with conn.cursor() as cur:
                def one(sql):
                    cur.execute(sql)
                    return cur.fetchall()
                logs = one("SHOW BINARY LOGS")
                status = one("SHOW MASTER STATUS")
                metadata = one("SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA'")
                checksum = one("select @@GLOBAL.binlog_checksum as checksum")
                with pytest.raises(pymysql.err.ProgrammingError) as parse_error:
                    one("SHOW BINARY LOG STATUS")
        finally:
            conn.close()
    assert logs == tuple(tuple(r) for r in server.execute("SHOW BINARY LOGS"))
    assert status == tuple(tuple(r) for r in server.execute("SHOW MASTER STATUS"))
    assert metadata == (("binlog_row_metadata", "FULL"),) == tuple(
        tuple(r) for r in server.execute("SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA'"))
    assert checksum == (("CRC32",),)
    assert parse_error.value.args[0] == 1064


@pytest.mark.skipif(why_no_zongji() is not None, reason=str(why_no_zongji()))
def test_zongji_reads_the_rows_the_primary_gives(primary, archive):
    server, _ = primary
    live = Endpoint.of_server(server)
    count = len(pmr_rows(live, True, log_file="binlog.000001", log_pos=4))
    with serve(archive) as handle:
        served = zongji_rows(ends(handle), count)
    assert served == zongji_rows(live, count)
    assert ["insert", "d", "t", {"id": 1, "v": 1}] in [list(r) for r in served]
