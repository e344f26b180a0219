"""``serve`` over a MySQL 9.7 source's archive for the binlog clients that are not
replicas, each against serve and against the live source (conftest.py's ``world``):
``mysqlbinlog --read-from-remote-server`` raw and decoded, python-mysql-replication by
file:position and by GTID set, zongji."""

import os
import uuid

import pymysql
import pytest

from tests.serve.clients import (Endpoint, files_in, pmr_rows, read_decoded, read_raw,
                                 why_no_zongji, without_in_use, zongji_rows)
from tests.serve.test_serve_mysql import PASSWORD, USER, serve

pytestmark = pytest.mark.mysql


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """mysqlbinlog of the MySQL tree (a chroot wrapper), and a folder it and the host
    both see by one path (where --raw writes)."""
    from mysqlbackup.sandbox.mysql import client_wrappers, shared_dir
    bin_dir = client_wrappers(tmp_path_factory.mktemp("mysql-bin"))
    shared = os.path.join(shared_dir(), f"serve-clients-{uuid.uuid4().hex[:8]}")
    os.makedirs(shared)
    yield os.path.join(bin_dir, "mysqlbinlog"), shared
    import shutil
    shutil.rmtree(shared, ignore_errors=True)


def ends(handle):
    return Endpoint.of_serve(handle, USER, PASSWORD)


def test_mysqlbinlog_raw_gets_the_archived_files_and_ends(world, tools):
    mysqlbinlog, shared = tools
    source = world["source"]
    with serve(world["url"]) as handle:
        served = read_raw(mysqlbinlog, ends(handle), "binlog.000001",
                          os.path.join(shared, "serve"))
    live = read_raw(mysqlbinlog, Endpoint.of_server(source), "binlog.000001",
                    os.path.join(shared, "primary"))
    archived = {n: d for n, d in files_in(world["files"]).items() if n != "binlog.index"}
    assert list(served) == list(archived) and len(served) >= 3
    assert served == live
    newest = list(archived)[-1]
    assert served[newest] == without_in_use(archived[newest])
    assert all(served[n] == archived[n] for n in list(archived)[:-1])


def test_mysqlbinlog_decoded_as_from_the_source(world, tools):
    mysqlbinlog, shared = tools
    with serve(world["url"]) as handle:
        served = read_decoded(mysqlbinlog, ends(handle), "binlog.000001",
                              os.path.join(shared, "s-load"))
    live = read_decoded(mysqlbinlog, Endpoint.of_server(world["source"]), "binlog.000001",
                        os.path.join(shared, "p-load"))
    assert "### INSERT INTO `d`.`t`" in served and ":nightly:" in served
    assert served == live


def test_python_mysql_replication_by_position_and_by_gtid(world):
    live = Endpoint.of_server(world["source"])
    with serve(world["url"]) as handle:
        from_file = pmr_rows(ends(handle), False, log_file="binlog.000001", log_pos=4)
        from_gtid = pmr_rows(ends(handle), False, auto_position=world["mid"])
    assert from_file == pmr_rows(live, False, log_file="binlog.000001", log_pos=4)
    assert from_gtid == pmr_rows(live, False, auto_position=world["mid"])
    assert ("insert", "d", "t", {"id": 0, "v": 0}) in from_file
    assert ("insert", "d", "t", {"id": 0, "v": 0}) not in from_gtid
    assert ("insert", "d", "u", {"a": 2}) in from_gtid


def ask(at, *statements):
    """Each statement's rows, or its error code, on one connection to ``at``."""
    conn = pymysql.connect(host=at.host, port=at.port, user=at.user, password=at.password,
                           database="information_schema")
    out = []
    try:
        with conn.cursor() as cur:
            for sql in statements:
                try:
                    cur.execute(sql)
                    out.append(cur.fetchall())
                except pymysql.err.MySQLError as e:
                    out.append(e.args[0])
    finally:
        conn.close()
    return out


def test_the_queries_of_binlog_clients_as_mysqld_answers_them(world):
    source = world["source"]
    statements = ("SHOW BINARY LOGS", "SHOW BINARY LOG STATUS", "SHOW MASTER STATUS",
                  "SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA'",
                  "select @@GLOBAL.binlog_checksum as checksum",
                  "SELECT COLUMN_NAME FROM INFORMATION_SCHEMA.COLUMNS WHERE TABLE_SCHEMA = 'd' "
                  "AND TABLE_NAME = 'u' ORDER BY ORDINAL_POSITION")
    with serve(world["url"]) as handle:
        pmr_rows(ends(handle), False, log_file="binlog.000001", log_pos=4)  # maps seen
        served = ask(ends(handle), *statements)
    live = ask(Endpoint.of_server(source), *statements)
    assert served[0] == tuple(r[:2] + ("No",) for r in live[0])  # the archive: unencrypted
    assert served[1:] == live[1:]
    assert served[2] == 1064 and served[5] == (("a",),)


@pytest.mark.skipif(why_no_zongji() is not None, reason=str(why_no_zongji()))
def test_zongji_reads_the_rows_the_source_gives(world):
    live = Endpoint.of_server(world["source"])
    count = len(pmr_rows(live, False, log_file="binlog.000001", log_pos=4))
    with serve(world["url"]) as handle:
        served = zongji_rows(ends(handle), count)
    assert served == zongji_rows(live, count)
    assert len(served) == count > 5


def test_blocking_readers_follow_the_archive(world, tools, tmp_path):
    """The archive without its newest file, then with it: python-mysql-replication
    (blocking=True) and mysqlbinlog --stop-never get the newly archived transactions
    on the same connection, as from a primary that commits them (the next file's fake
    ROTATE with the CRC32 of the events before it, as mysqld sends it: mysqlbinlog,
    which set @source_binlog_checksum='NONE', cut a name sent without it short)."""
    import shutil
    import threading

    from mysqlbackup.archive.codec import PLAIN
    from mysqlbackup.archive.importer import import_directory
    from mysqlbackup.archive.store import ArchiveStore
    from tests.helpers import wait_for
    mysqlbinlog, shared = tools
    names = sorted(n for n in files_in(world["files"]) if n != "binlog.index")
    part, url = tmp_path / "part", f"file://{tmp_path / 'growing'}"
    part.mkdir()
    for name in names[:-1]:
        shutil.copyfile(world["files"] / name, part / name)
    import_directory(ArchiveStore(url), str(part), "my1", echo=lambda line: None, codec=PLAIN)
    whole = pmr_rows(Endpoint.of_server(world["source"]), False, log_file=names[0], log_pos=4)
    out = os.path.join(shared, "follow")
    with serve(url, poll_interval=0.2) as handle:
        got = {}
        rows = threading.Thread(target=lambda: got.update(rows=pmr_rows(
            ends(handle), False, blocking=True, limit=len(whole), log_file=names[0],
            log_pos=4)))
        rows.start()
        reader = read_raw(mysqlbinlog, ends(handle), names[0], out, follow=True)
        try:
            wait_for(lambda: handle.dumps == 2, what="both readers dumping")
            shutil.copyfile(world["files"] / names[-1], part / names[-1])
            import_directory(ArchiveStore(url), str(part), "my1", echo=lambda line: None,
                             codec=PLAIN)
            rows.join(30)
            newest = os.path.join(out, names[-1])
            size = (world["files"] / names[-1]).stat().st_size
            wait_for(lambda: reader.poll() is not None or (
                os.path.exists(newest) and os.path.getsize(newest) == size),
                what=f"mysqlbinlog to follow into {names[-1]}: {os.listdir(out)}")
            assert reader.poll() is None, reader.stderr.read()
        finally:
            reader.kill()
            reader.wait()
    assert got.get("rows") == whole
    with open(newest, "rb") as f:
        assert f.read() == without_in_use((world["files"] / names[-1]).read_bytes())


def test_a_query_the_archive_cannot_answer_now_gets_an_error_not_a_guess(world, tmp_path):
    """The archive gone from under a running serve: SHOW BINARY LOGS and
    binlog_row_metadata get error 1105 naming the failure (not an empty list, not the
    engine's default, which a client would act on), the connection stays, and the
    archive back, the next connection gets the answers."""
    import shutil
    archive = world["url"][len("file://"):]
    copy, away = tmp_path / "archive", tmp_path / "away"
    shutil.copytree(archive, copy)
    statements = ("SHOW BINARY LOGS", "SHOW VARIABLES LIKE 'BINLOG_ROW_METADATA'", "SELECT 1")
    with serve(f"file://{copy}") as handle:
        copy.rename(away)
        gone = ask(ends(handle), *statements)
        away.rename(copy)
        back = ask(ends(handle), *statements)
    assert gone == [1105, 1105, ((1,),)]
    assert [name for name, _, _ in back[0]] == sorted(set(files_in(world["files"])) - {"binlog.index"})
    assert back[1:] == [(("binlog_row_metadata", "FULL"),), ((1,),)]

