"""What the serve tests share: the password, the commit times of the primary's three
files, and the helpers that start serve, attach a replica to it and wait."""

import shutil

import pymysql

from mysqlbackup.archive.codec import PLAIN
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.source.client import ReplicaClient
from replay.serve.server import ServeOptions, start_server
from tests.helpers import selection_of, wait_for

PASSWORD = "serve-secret"
T0 = 1700000000      # commit times of the three files' transactions: T0, T0+100, T0+200


class PatientClient(ReplicaClient):
    """Our replica client for dump tests: a short heartbeat ends each dump fast, and a
    loaded machine may still leave a server silent for seconds, which is no dead link
    here."""
    silence_limit = 30.0


def serve(url, listen=("127.0.0.1", 0), storage_options=None, tls=None, **selection):
    return start_server(ServeOptions(url, "db1", listen, "mysqlbackup_serve", PASSWORD,
                                     selection_of(**selection),
                                     storage_options=storage_options or {}, **(tls or {})))


def attach(replica, handle, gtid=True, log_file=None, log_pos=None, password=PASSWORD,
           extra=""):
    where = "MASTER_USE_GTID=slave_pos" if gtid else (
        f"MASTER_USE_GTID=no, MASTER_LOG_FILE='{log_file}', MASTER_LOG_POS={log_pos}")
    where += extra
    replica.execute(f"CHANGE MASTER TO MASTER_HOST='{handle.host}', MASTER_PORT={handle.port}, "
                    f"MASTER_USER='mysqlbackup_serve', MASTER_PASSWORD='{password}', "
                    f"MASTER_CONNECT_RETRY=1, MASTER_HEARTBEAT_PERIOD=0.5, {where}",
                    "START SLAVE")


def status(replica):
    conn = replica.root()
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            return cur.fetchone()
    finally:
        conn.close()


def caught_up(replica, gtid):
    """Wait until the replica has applied up to ``gtid`` and is idle, connected."""
    def done():
        row = status(replica)
        return (replica.execute("SELECT @@gtid_slave_pos")[0][0] == gtid
                and row["Slave_IO_Running"] == "Yes"
                and (row["Slave_SQL_Running_State"] or "").startswith(
                    "Slave has read all relay log"))
    wait_for(done, timeout=20, what=f"the replica at {gtid}")


def gtid_executed(server):
    """A MySQL server's gtid_executed, on one line."""
    return server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")


def rows(server):
    return server.execute("SELECT id, v FROM d.t ORDER BY id")


def checksums(server):
    return [server.execute(f"CHECKSUM TABLE d.{t}")[0][1] for t in ("t", "m")]


def growing_archive(binlog_dir, tmp_path):
    """An archive of files 1, 2 and file 3 up to its first transaction; a callable that
    archives the rest of file 3; file 3's full size."""
    url, part = f"file://{tmp_path / 'growing'}", tmp_path / "part"
    part.mkdir()
    for name in ("binlog.000001", "binlog.000002"):
        shutil.copyfile(binlog_dir / name, part / name)
    data = (binlog_dir / "binlog.000003").read_bytes()
    cut = next(off + len(e) for off, e in iter_events(data, 4, None) if e[4] == ev.XID)
    (part / "binlog.000003").write_bytes(data[:cut])
    import_directory(ArchiveStore(url), str(part), "db1", echo=lambda line: None, codec=PLAIN)

    def rest():
        shutil.copyfile(binlog_dir / "binlog.000003", part / "binlog.000003")
        import_directory(ArchiveStore(url), str(part), "db1", echo=lambda line: None,
                         codec=PLAIN)
    return url, rest, cut, len(data)
