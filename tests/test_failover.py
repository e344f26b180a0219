"""A primary replaced by another server that reuses its binlog file names, archived under
the same source: nothing the first server's daemon archived is taken for the second's,
overwritten or deleted (invariant 4); the second daemon's archiver stops, loudly, naming
the file and both servers, every pass, while its local files stay whole.

(Following the history across the switch, per-server histories in the archive, is the
failover issue's own work; this is the guard that keeps the archive sound until then.)"""

from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import Daemon, wait_for


def snapshot(store):
    """Every object of the archive with its bytes."""
    store.invalidate()
    return {name: store.read(name) for name in store.list() if "/binlog/" in name
            or "/partial/" in name}


def test_another_servers_file_of_the_same_name_is_never_archived_over(make_server, tmp_path):
    a = make_server(server_id=1, semi_sync=False)
    b = make_server(server_id=2, semi_sync=False)
    url = f"file://{tmp_path / 'archive'}"
    store = ArchiveStore(url)
    for server in (a, b):
        server.execute("CREATE DATABASE z", "CREATE TABLE z.t (id INT PRIMARY KEY "
                       "AUTO_INCREMENT, v TEXT)",
                       *["INSERT INTO z.t (v) VALUES (REPEAT('v', 300))"] * 5)
    a.execute("FLUSH BINARY LOGS", "INSERT INTO z.t (v) VALUES ('a, active file')")
    first = Daemon(a, tmp_path / "a", "--archive", url, "--archive-interval", "0.2",
                   "--source-name", "db1").start()
    try:
        wait_for(lambda: store.exists("db1/binlog/binlog.000001.json") and any(
            n.endswith(".json") for n in store.list("db1/partial/binlog.000002")),
            what="A's sealed file and A's active file's segment archived")
    finally:
        assert first.stop() == 0, first.output()
    before = snapshot(store)
    b.execute("FLUSH BINARY LOGS", "INSERT INTO z.t (v) VALUES ('b')", "FLUSH BINARY LOGS",
              "INSERT INTO z.t (v) VALUES ('b, active file')")  # b's binlog.000001-000003
    second = Daemon(b, tmp_path / "b", "--archive", url, "--archive-interval", "0.2",
                    "--source-name", "db1", server_id=78).start()
    try:
        report = wait_for(lambda: (second.status().get("archive") or {}).get("last_error"),
                          what="the archiver's refusal")
        assert report == (
            "the archive holds db1 binlog.000001 written by server_id 1, but the local "
            "binlog.000001 is server_id 2's (a failover to a server that reuses the file "
            "names?): the archived copy is kept as it is and this one is not archived; "
            "stream this server under another --source-name"), report
        wait_for(lambda: second.output().count("archive upload failed") >= 2,
                 what="the refusal at every pass")
        assert snapshot(store) == before   # nothing overwritten, deleted or added
        assert second.status()["state"]["durable_file"] == "binlog.000003"  # stream goes on
    finally:
        assert second.stop() == 0, second.output()
    assert snapshot(store) == before
