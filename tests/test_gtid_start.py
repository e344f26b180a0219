"""Starting by GTID, and following a new source by GTID after a failover."""

import os

from tests.helpers import (Daemon, caught_up, current_binlog, read, run_cli,
                           same_except_in_use_flag, wait_for)


def gtid_pos(server):
    return server.execute("SELECT @@gtid_binlog_pos")[0][0]


def test_start_gtid_begins_at_the_file_holding_the_next_transaction(make_server, tmp_path):
    server = make_server()
    server.execute("CREATE DATABASE g", "CREATE TABLE g.t (a INT)", "INSERT INTO g.t VALUES (1)",
                   "FLUSH BINARY LOGS", "INSERT INTO g.t VALUES (2)", "FLUSH BINARY LOGS")
    position = gtid_pos(server)
    start = current_binlog(server)
    server.execute("INSERT INTO g.t VALUES (3)")
    daemon = Daemon(server, tmp_path / "d", "--start-gtid", position).start()
    try:
        wait_for(lambda: caught_up(server, daemon.directory), what="catch-up")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert sorted(n for n in os.listdir(daemon.directory) if n.startswith("binlog.")) == [start]
    assert same_except_in_use_flag(os.path.join(daemon.directory, start),
                                   server.binlog_path(start))


def test_follow_by_gtid_continues_on_a_promoted_replica(make_server, tmp_path):
    old = make_server()
    new = make_server(server_id=2, semi_sync=False, log_bin_name="replica-bin",
                      extra_args=["--log-slave-updates"])
    new.replicate_from(old)
    old.execute("CREATE DATABASE f", "CREATE TABLE f.t (a INT PRIMARY KEY)",
                *[f"INSERT INTO f.t VALUES ({i})" for i in range(20)])
    daemon = Daemon(old, tmp_path / "d").start()
    wait_for(lambda: caught_up(old, daemon.directory), what="catch-up on the old source")
    assert daemon.stop() == 0
    wait_for(lambda: gtid_pos(new) == gtid_pos(old), what="the replica to catch up")

    refused = run_cli("stream", "--source", new.url, "--server-id", "77", "--dir",
                      daemon.directory)
    assert refused.returncode == 8 and "--follow-by-gtid" in refused.stderr

    follower = Daemon(new, tmp_path / "d", "--follow-by-gtid").start()
    try:
        old.execute(*[f"INSERT INTO f.t VALUES ({i})" for i in range(20, 30)])
        wait_for(lambda: gtid_pos(new) == gtid_pos(old), what="replication")
        epoch = os.path.join(follower.directory, "epoch", "2")  # the new server's files
        wait_for(lambda: caught_up(new, epoch), what="catch-up on the new source")
    finally:
        assert follower.stop() == 0, follower.output()
    name = current_binlog(new)
    assert name.startswith("replica-bin.")
    assert same_except_in_use_flag(os.path.join(epoch, name), new.binlog_path(name))
    assert not os.path.exists(os.path.join(follower.directory, name))
    status = follower.status()["state"]
    assert status["source_identity"] == "server-id-2" and status["gtid"] == gtid_pos(new)
    assert status["epoch"] == 2
    kept = bytearray(read(os.path.join(follower.directory, "binlog.000001")))
    original = bytearray(read(old.binlog_path("binlog.000001"))[:len(kept)])
    kept[21] = original[21] = 0  # the in-use flag of the old source's still-active file
    assert kept == original  # the old source's file is kept as it was
