"""``mysqlbackup undo`` and where the transactions lie: several from a compressed and
encrypted archive, one in the newest file's archived segments, MySQL without GTIDs by
position, and a big one in bounded memory."""

import subprocess

import pytest

from tests.helpers import current_binlog, run_cli
from tests.undo_world import (PEAK, _archive, _bad, _checksums, _later, _setup, last_gtid,
                              shop_server, undo)

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    yield from shop_server(tmp_path_factory)


def test_two_transactions_undone_together_from_an_encrypted_archive(shop, tmp_path):
    """Two bad transactions, the second changing rows the first changed, undone in one go
    newest first; the archive's objects zstd-compressed and age-encrypted."""
    _setup(shop)
    first = _bad(shop)
    shop.execute("BEGIN", "UPDATE shop.items SET tx = 'second' WHERE id IN (1, 30)",
                 "DELETE FROM shop.items WHERE id = 50", "COMMIT")
    second = last_gtid(shop)
    _later(shop)
    keys = tmp_path / "keys"
    keys.mkdir()
    made = run_cli("keygen", "--identity", str(keys / "id"), "--recipient", str(keys / "pub"))
    assert made.returncode == 0, made.stderr
    url = _archive(shop, tmp_path, "--compress", "zstd", "--encrypt-to", str(keys / "pub"))
    without = undo(shop, url, "--gtid", first, "--gtid", second)
    assert without.returncode == 2 and "identity" in without.stderr, without.stderr
    done = undo(shop, url, "--gtid", second, "--gtid", first, "--identity", str(keys / "id"))
    assert done.returncode == 0, done.stderr
    assert f"2 transaction(s) ({first}, {second})" in done.stdout
    after = _checksums(shop)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]


def test_a_transaction_in_the_newest_files_archived_segments(shop, tmp_path):
    """The daemon streams the primary into the archive; the bad transaction lies in the
    newest file, archived as segments (not sealed)."""
    from tests.helpers import Daemon, wait_archived_to_the_end
    from mysqlbackup.archive.store import ArchiveStore
    _setup(shop)
    shop.execute("FLUSH BINARY LOGS")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(shop, tmp_path / "d", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2", "--start-file", current_binlog(shop),
                    "--no-semi-sync", server_id=991).start()
    try:
        gtid = _bad(shop)
        _later(shop)
        wait_archived_to_the_end(shop, ArchiveStore(url))
        done = undo(shop, url, "--gtid", gtid)
        assert done.returncode == 0, done.stderr
    finally:
        assert daemon.stop() == 0, daemon.output()
    after = _checksums(shop)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]


def test_mysql_without_gtids_undoes_by_position(make_mysql, tmp_path):
    """MySQL's default gtid_mode=OFF: the transaction named by where archive find says
    it starts (--at FILE:START)."""
    server = make_mysql(gtid_mode="OFF")
    server.execute("SET GLOBAL sql_mode = ''", "CREATE DATABASE shop")
    _setup(server)
    _bad(server)
    _later(server)
    url = _archive(server, tmp_path)
    found = run_cli("archive", "find", "--archive", url, "--table", "shop.nokey",
                    "--type", "delete")
    assert found.returncode == 0, found.stderr
    line = found.stdout.splitlines()[-1]
    assert line.startswith("- ")
    at = line.split()[2].split("-")[0]  # FILE:START of FILE:START-END
    done = undo(server, url, "--at", at)
    assert done.returncode == 0, done.stderr
    assert f"1 transaction(s) ({at}), 27 row(s)" in done.stdout
    after = _checksums(server)
    assert after["items"] == after["items_ref"] and after["nokey"] == after["nokey_ref"]
    wrong = undo(server, url, "--at", at.split(":")[0] + ":4")
    assert wrong.returncode == 2 and "holds no committed transaction" in wrong.stderr


def test_a_big_transaction_undoes_in_bounded_memory(shop, tmp_path):
    """200,000 row updates in one transaction (28 MB of binlog): the undo's peak RSS is
    a 1,000-row undo's, give or take (the events spooled to a file, the expected rows in
    SQLite), whatever the process's baseline."""
    peaks = [_undo_peak_mb(shop, tmp_path / str(rows), rows) for rows in (1000, 200000)]
    assert peaks[1] - peaks[0] < 40, f"peak RSS {peaks[0]:.0f} MB, then {peaks[1]:.0f} MB"


def _undo_peak_mb(shop, tmp_path, rows):
    import os
    import sys
    tmp_path.mkdir()
    shop.execute("DROP TABLE IF EXISTS shop.big",
                 "CREATE TABLE shop.big (id INT PRIMARY KEY, a INT, s CHAR(32)) ENGINE=InnoDB",
                 f"INSERT INTO shop.big SELECT seq, seq, MD5(seq) FROM shop.seq_1_to_{rows}")
    wanted = shop.execute("CHECKSUM TABLE shop.big")[0][1]
    shop.execute("UPDATE shop.big SET a = 0, s = ''")
    gtid = last_gtid(shop)
    url = _archive(shop, tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", PEAK, "undo", "--archive", url, "--gtid", gtid, "--target",
         f"mysql://root@127.0.0.1:{shop.port}"], capture_output=True, text=True,
        env=dict(os.environ, MYSQLBACKUP_TARGET_PASSWORD=""), timeout=600)
    assert done.returncode == 0, done.stderr
    assert f"{rows} row(s) in shop.big reversed" in done.stdout
    assert shop.execute("CHECKSUM TABLE shop.big")[0][1] == wanted
    return int(done.stderr.rsplit("peak ", 1)[1].split()[0]) / 1024
