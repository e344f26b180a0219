"""``mysqlbackup serve``: a real MariaDB replica fed from the archive (file:// and S3
through moto, plain and zstd), by GTID and by file:position, with stop points,
exclusions, a restart of serve at a stop point and mid-stream (killed, stopped), TLS,
a wrong password and a position the archive lacks. One primary writes three binlog
files (the last one active, archived as a partial file); a second one the big
stream of the mid-stream restart; one replica is reset between tests."""

import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pymysql
import pytest
from click.testing import CliRunner

from mysqlbackup.archive.codec import PLAIN, make_codec
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.cli import main
from mysqlbackup.sandbox import MariaDBSandbox, free_port
from replay.planning.options import build_selection
from replay.serve.server import ServeOptions, start_server
from tests.helpers import REPO, module_primary, wait_for

PASSWORD = "serve-secret"
T0 = 1700000000      # commit times of the three files' transactions: T0, T0+100, T0+200


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    server = module_primary(tmp_path_factory, "serve-primary")
    gtids = []

    def run(*statements):
        server.execute(*statements)
        gtids.append(server.execute("SELECT @@gtid_binlog_pos")[0][0])
    run(f"SET timestamp={T0}", "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, "
        "v INT)", "CREATE TABLE d.m (id INT PRIMARY KEY) ENGINE=MyISAM")
    run(f"SET timestamp={T0}", *[f"INSERT INTO d.t VALUES ({i}, {i})" for i in (1, 2, 3)])
    server.execute("FLUSH BINARY LOGS")
    run(f"SET timestamp={T0 + 100}", "INSERT INTO d.t VALUES (4, 4)",
        "INSERT INTO d.m VALUES (1)", "UPDATE d.t SET v = v + 10 WHERE id < 3")
    server.execute("FLUSH BINARY LOGS")
    run(f"SET timestamp={T0 + 200}", "INSERT INTO d.t VALUES (5, 5)",
        "DELETE FROM d.t WHERE id = 1", "INSERT INTO d.t VALUES (6, 6)",
        "CREATE TABLE d.gone (id INT)", "INSERT INTO d.gone VALUES (7)", "DROP TABLE d.gone")
    yield server, gtids
    server.stop(remove=True)


@pytest.fixture(scope="module")
def binlog_dir(primary, tmp_path_factory):
    server, _ = primary
    keep = tmp_path_factory.mktemp("serve-files")
    for name in server.binlog_files():
        shutil.copyfile(server.binlog_path(name), keep / name)
    return keep


@pytest.fixture(scope="module")
def archive(binlog_dir, tmp_path_factory):
    url = f"file://{tmp_path_factory.mktemp('serve-archive')}"
    import_directory(ArchiveStore(url), str(binlog_dir), "db1", echo=lambda line: None,
                     codec=PLAIN)
    return url


@pytest.fixture(scope="module")
def replica_server(tmp_path_factory):
    # a small relay log space: what the replica receives stays a little ahead of what it
    # applies (a big stream is provably mid-way while it is received)
    server = MariaDBSandbox(str(tmp_path_factory.mktemp("serve-replica")), server_id=2,
                            log_bin=False, semi_sync=False, extra_args=[
                                "--relay-log-space-limit=65536", "--max-relay-log-size=16384",
                                "--innodb-flush-log-at-trx-commit=2"]).start()
    yield server
    server.stop(remove=True)


@pytest.fixture
def replica(replica_server):
    """The module's replica, empty and without a primary."""
    replica_server.execute("STOP SLAVE", "RESET SLAVE ALL", *[
        f"DROP DATABASE IF EXISTS {d}" for d in ("d", "big", "gate")],
        "SET GLOBAL gtid_slave_pos = ''")
    yield replica_server
    replica_server.execute("STOP SLAVE")


def serve(url, listen=("127.0.0.1", 0), storage_options=None, tls=None, **selection):
    return start_server(ServeOptions(url, "db1", listen, "mysqlbackup_serve", PASSWORD,
                                     build_selection(**selection),
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


def rows(server):
    return server.execute("SELECT id, v FROM d.t ORDER BY id")


def checksums(server):
    return [server.execute(f"CHECKSUM TABLE d.{t}")[0][1] for t in ("t", "m")]


def test_full_stream_by_gtid_reaches_the_primary(primary, archive, replica, caplog):
    server, gtids = primary
    caplog.set_level(logging.INFO, logger="replay.serve")
    with serve(archive) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        end = handle.wait_end(5)
        assert (end.last_gtid, end.reason) == (gtids[-1], "end of the archive")
        time.sleep(1.2)  # heartbeats keep it connected and idle, with nothing more
        row = status(replica)
        assert (row["Slave_IO_Running"], row["Last_IO_Errno"]) == ("Yes", 0)
        assert replica.execute("SELECT @@gtid_slave_pos")[0][0] == gtids[-1]
        other = dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD,
                          ("binlog.000003", 4), 90)  # a second replica meanwhile
        assert other[-1][4] == 27 and len(other) > 10
        replica.execute("STOP SLAVE")  # the replica goes: logged, and serve goes on
        wait_for(lambda: any("(replica server_id 2): disconnected" in r.getMessage()
                             for r in caplog.records), timeout=10, what="the disconnect logged")
        replica.execute("START SLAVE")
        caught_up(replica, gtids[-1])
        assert handle.dumps == 3  # the replica, the other, the replica again


def test_stop_before_gtid_then_restart_of_serve_continues(primary, archive, replica):
    server, gtids = primary
    port = free_port()
    stop = gtids[1].split("-")
    first = f"{stop[0]}-{stop[1]}-{int(stop[2]) + 1}"  # the first transaction of file 2
    with serve(archive, ("127.0.0.1", port), stop_before_gtid=first) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[1])
        assert rows(replica) == ((1, 1), (2, 2), (3, 3))
        assert handle.wait_end(5).reason == f"stop before GTID {first}"
    with serve(archive, ("127.0.0.1", port)):  # the replica reconnects by itself, by GTID
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)


def test_stop_by_datetime_and_by_position(primary, archive, replica, binlog_dir):
    server, gtids = primary
    with serve(archive, stop_datetime="2023-11-14T22:15:00Z") as handle:  # T0 + 100 s
        attach(replica, handle)
        caught_up(replica, gtids[1])
        assert handle.wait_end(5).reason == "stop datetime reached"
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")
    size = os.path.getsize(binlog_dir / "binlog.000002")
    with serve(archive, stop_position=f"binlog.000002:{size - 1}") as handle:
        attach(replica, handle)
        caught_up(replica, gtids[2])
        assert rows(replica) == ((1, 11), (2, 12), (3, 3), (4, 4))


def test_by_file_position_and_a_file_the_archive_lacks(primary, archive, replica):
    server, gtids = primary
    with serve(archive) as handle:
        attach(replica, handle, gtid=False, log_file="binlog.000001", log_pos=4)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        replica.execute("STOP SLAVE", "RESET SLAVE ALL")
        attach(replica, handle, gtid=False, log_file="binlog.000009", log_pos=4)
        wait_for(lambda: status(replica)["Last_IO_Errno"] == 1236, timeout=10,
                 what="error 1236")
        assert "Could not find first log file name in binary log index file" in status(
            replica)["Last_IO_Error"]
        assert handle.errors[-1][0] == 1236


def test_exclude_gtids_sends_them_empty(primary, archive, replica):
    """An InnoDB transaction (XID), a MyISAM one (COMMIT) and a DROP TABLE (a statement
    alone, sent as DO 0) excluded: nothing of them applied, the GTID position whole."""
    server, gtids = primary
    domain, server_id, last_of_2 = gtids[2].split("-")
    update = f"{domain}-{server_id}-{last_of_2}"                       # the UPDATE
    myisam = f"{domain}-{server_id}-{int(last_of_2) - 1}"              # INSERT INTO d.m
    drop = gtids[-1]                                                   # the bad DROP
    with serve(archive, exclude_gtids=f"{update},{myisam},{drop}") as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert rows(replica) == ((2, 2), (3, 3), (4, 4), (5, 5), (6, 6))
        assert replica.execute("SELECT COUNT(*) FROM d.m")[0][0] == 0
        assert replica.execute("SELECT id FROM d.gone") == ((7,),)
        assert status(replica)["Last_SQL_Errno"] == 0
        assert handle.wait_end(5).last_gtid == gtids[-1]


def test_a_gtid_state_the_archive_lacks_and_a_wrong_password(primary, archive, replica):
    with serve(archive) as handle:
        replica.execute("SET GLOBAL gtid_slave_pos = '0-1-999'")
        attach(replica, handle)
        wait_for(lambda: status(replica)["Last_IO_Errno"] == 1236, timeout=10,
                 what="error 1236")
        assert "0-1-999, which is not in the master's binlog" in status(replica)[
            "Last_IO_Error"]
        with pytest.raises(pymysql.err.OperationalError) as refused:
            pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                            password="wrong", connect_timeout=5)
        assert refused.value.args[0] == 1045
        conn = pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                               password=PASSWORD, connect_timeout=5)
        with conn.cursor() as cur:  # it keeps serving after both
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            assert cur.fetchone()[0] == primary[1][-1]
        conn.close()


def test_s3_archive_compressed_and_encrypted(primary, binlog_dir, replica, s3, tmp_path):
    """zstd then age on S3 (moto): refused at start without the identity, served with it."""
    from mysqlbackup.archive.codec import IdentityError, keygen
    server, gtids = primary
    keygen(tmp_path / "id.txt", tmp_path / "id.pub")
    url = s3.bucket("serve-" + os.urandom(4).hex())
    options = {"endpoint_url": s3.endpoint}
    import_directory(ArchiveStore(url, options), str(binlog_dir), "db1", echo=lambda line: None,
                     codec=make_codec("zstd", [str(tmp_path / "id.pub")]))
    with pytest.raises(IdentityError):
        serve(url, storage_options=options)
    with start_server(ServeOptions(url, "db1", password=PASSWORD, storage_options=options,
                                   identity=str(tmp_path / "id.txt"))) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)


def test_follows_the_archive_as_it_grows(primary, binlog_dir, replica, tmp_path, caplog):
    """Files 1-2 and the first transaction of file 3 archived; the replica gets them and
    waits; then the rest of file 3 is archived (a second segment of the newest file)
    while a next file's upload is in flight (its object, no index): nothing is sent
    until the archive is whole again, then the dump goes on from where it stood,
    without a reconnect or an error."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    server, gtids = primary
    url = f"file://{tmp_path / 'growing'}"
    part = tmp_path / "part"
    part.mkdir()
    for name in ("binlog.000001", "binlog.000002"):
        shutil.copyfile(binlog_dir / name, part / name)
    data = (binlog_dir / "binlog.000003").read_bytes()
    cut = next(off + len(e) for off, e in iter_events(data, 4, None) if e[4] == ev.XID)
    (part / "binlog.000003").write_bytes(data[:cut])
    import_directory(ArchiveStore(url), str(part), "db1", echo=lambda line: None, codec=PLAIN)
    domain, server_id, seq = gtids[2].split("-")
    with start_server(ServeOptions(url, "db1", ("127.0.0.1", 0), "mysqlbackup_serve", PASSWORD,
                                   poll_interval=0.2)) as handle:
        attach(replica, handle)
        caught_up(replica, f"{domain}-{server_id}-{int(seq) + 1}")
        assert handle.dumps == 1
        shutil.copyfile(binlog_dir / "binlog.000003", part / "binlog.000003")
        store = ArchiveStore(url)
        store.put_bytes("db1/binlog/binlog.000004", b"\xfebin")  # its index not written yet
        import_directory(store, str(part), "db1", echo=lambda line: None, codec=PLAIN)
        time.sleep(0.5)  # polls meanwhile: the archive cannot be planned, nothing is sent
        assert replica.execute("SELECT @@gtid_slave_pos")[0][0] != gtids[-1]
        assert any("cannot be planned yet" in r.getMessage() for r in caplog.records)
        store.remove("db1/binlog/binlog.000004")
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        assert (handle.dumps, handle.errors) == (1, [])  # the same dump went on


def test_cli_bad_input_and_a_real_run(archive, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, MYSQLBACKUP_SERVE_PASSWORD=PASSWORD)

    def cli(*args):
        done = CliRunner().invoke(main, ["serve", *args], env=env)
        return SimpleNamespace(returncode=done.exit_code, stderr=done.stderr)
    done = cli("--listen", "127.0.0.1:1")
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: --archive is required\n")
    done = cli("--archive", archive, "--source-name", "nope", "--listen", "127.0.0.1:0")
    assert done.returncode == 2
    assert done.stderr == "mysqlbackup: error: the archive has no source 'nope' (it has: db1)\n"
    done = cli("--archive", archive, "--listen", "localhost")
    assert done.stderr == ("mysqlbackup: error: bad --listen 'localhost': expected HOST:PORT, "
                           "e.g. 127.0.0.1:3307\n")
    done = cli("--archive", archive, "--require-tls")
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: --require-tls needs "
                                              "--tls-cert (and --tls-key)\n")
    done = cli("--archive", archive, "--tls-cert", str(tmp_path / "none.pem"))
    assert (done.returncode, done.stderr) == (2, f"mysqlbackup: error: cannot load the TLS "
                                              f"certificate {tmp_path / 'none.pem'}: No such "
                                              f"file or directory\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = cli("--archive", archive, "--listen", f"127.0.0.1:{busy}")
    assert (done.returncode, done.stderr) == (2, f"mysqlbackup: error: cannot listen on "
                                              f"127.0.0.1:{busy}: Address already in use\n")
    env["MYSQLBACKUP_SERVE_PASSWORD"] = None
    done = cli("--archive", archive)
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: no password for "
                                              "mysqlbackup_serve: set "
                                              "$MYSQLBACKUP_SERVE_PASSWORD or --password-file\n")
    env.pop("MYSQLBACKUP_SERVE_PASSWORD")
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "serve", "--archive", archive,
                             "--listen", f"127.0.0.1:{port}", "--password-file",
                             str(tmp_path / "pw")], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stderr.readline()
        assert line == f"serving db1 from {archive} on 127.0.0.1:{port} (user mysqlbackup_serve)\n"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def dump_from(host, port, user, password, start, server_id, semi_sync=False):
    """Every event a dump sends up to and including its first heartbeat, as our own
    replica client sees it (the FDE's in-use flag cleared: the server's active file)."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.source import protocol
    from mysqlbackup.source.client import ReplicaClient
    from mysqlbackup.source.spec import SourceSpec
    client = ReplicaClient(SourceSpec(host, port, user, password), server_id,
                           semi_sync=semi_sync, heartbeat=0.2)
    client.connect()
    try:
        if isinstance(start, str):  # a GTID state
            client._prepare_dump()
            client.query(f"SET @slave_connect_state = '{start}'")
            client._send(protocol.binlog_dump_payload(server_id, "", 4))
            client._new_decoder()
        else:
            client.start_dump(*start)
        out = []
        while not out or out[-1][4] != ev.HEARTBEAT:
            out += [bytearray(e) for e, _ in client.read_batch(timeout=5)]
        for event in out:
            if event[4] == ev.FORMAT_DESCRIPTION:
                event[17] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
        return [bytes(e) for e in out]
    finally:
        client.conn.close()


def test_the_dump_is_byte_for_byte_the_primarys(primary, archive, binlog_dir):
    """Our own replica client dumps from the real primary and from serve, from a
    file's start, from a transaction boundary inside a file, and by GTID from inside a
    file, at a file's end and from nothing: the same events, artificial ones included,
    up to the first heartbeat."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
    server, gtids = primary
    data = (binlog_dir / "binlog.000002").read_bytes()
    mid = next(off + len(e) for off, e in iter_events(data, 4, None) if e[4] == ev.XID)
    with serve(archive) as handle:
        starts = [("binlog.000001", 4), ("binlog.000002", mid), gtids[0], gtids[1], ""]
        served = []
        for i, start in enumerate(starts):
            real = dump_from("127.0.0.1", server.port, REPL_USER, REPL_PASSWORD, start, 60 + i)
            ours = dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD, start,
                             70 + i)
            served.append(ours)
            assert [e[4] for e in ours] == [e[4] for e in real], start
            assert ours == real, start
        # a semi-sync replica (@rpl_semi_sync_slave=1): the 0xEF header on every packet
        assert dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD, starts[0],
                         80, semi_sync=True) == served[0]


def test_an_incomplete_tail_is_never_sent(primary, binlog_dir, monkeypatch):
    """The newest file cut inside a transaction (and inside an event): what goes out
    ends with the last whole transaction; the heartbeats name where it ends."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    from replay.planning.selection import Selection
    from replay.serve.feed import DumpContext, DumpStart, dump_events
    data = (binlog_dir / "binlog.000003").read_bytes()
    ends = [off + len(e) for off, e in iter_events(data, 4, None) if e[4] == ev.XID]
    monkeypatch.setattr("replay.serve.feed.SPOOL_LIMIT", 60)  # transactions spooled to disk
    for cut in (ends[1] + 60, ends[1] + 5):  # inside the next transaction / its GTID event
        unit = {"name": "binlog.000003", "partial": True,
                "index": {"gtid_before": "", "gtid_after": "0-1-99", "end": cut}}
        ctx = DumpContext(lambda u: iter([data[:cut]]), Selection(), 1, True)
        out = list(dump_events([unit], DumpStart("binlog.000003", 4), ctx))
        sent = [e for kind, e in out if kind == "event"]
        assert sent[-1][4] == ev.XID and ev.parse_header(sent[-1]).log_pos == ends[1]
        assert b"".join(sent[1:]) == data[4:ends[1]]  # after the fake ROTATE: the file's bytes
        assert (out[-1][1].file, out[-1][1].pos) == ("binlog.000003", ends[1])


# -- TLS ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and serve's certificate for 127.0.0.1 (made as tests/test_tls.py makes its own)."""
    import ipaddress

    from cryptography import x509

    from tests.test_tls import _issue
    d = tmp_path_factory.mktemp("serve-pki")
    ca = _issue(d, "ca", "serve test CA", ca=True)
    _issue(d, "serve", "serve", ca, sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    return d


def test_tls_replica_gets_it_all_and_clear_text_is_denied(primary, archive, replica, pki,
                                                          caplog):
    """--tls-cert with --require-tls: a replica with MASTER_SSL=1 that checks serve's
    certificate against the CA gets everything over TLS; the same replica without
    MASTER_SSL is denied (1045, as a user REQUIRE SSL is) and no dump starts."""
    server, gtids = primary
    caplog.set_level(logging.INFO, logger="replay.serve")
    tls = {"tls_cert": str(pki / "serve.pem"), "tls_key": str(pki / "serve.key"),
           "require_tls": True}
    with serve(archive, tls=tls) as handle:
        attach(replica, handle, extra=f", MASTER_SSL=1, MASTER_SSL_CA='{pki / 'ca.pem'}', "
                                      f"MASTER_SSL_VERIFY_SERVER_CERT=1")
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        assert handle.dump_tls in (["TLSv1.3"], ["TLSv1.2"])
        assert status(replica)["Master_SSL_Verify_Server_Cert"] == "Yes"
        replica.execute("STOP SLAVE", "CHANGE MASTER TO MASTER_SSL=0", "START SLAVE")
        wait_for(lambda: status(replica)["Last_IO_Errno"] == 1045, timeout=10,
                 what="error 1045")
        assert ("Access denied for user 'mysqlbackup_serve'@'127.0.0.1' (using password: YES)"
                in status(replica)["Last_IO_Error"])
        assert handle.dumps == 1
        assert any("clear text refused (--require-tls)" in r.getMessage()
                   for r in caplog.records)
        client = pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                                 password=PASSWORD, ssl={"ca": str(pki / "ca.pem")},
                                 connect_timeout=5)
        with client.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            assert cur.fetchone()[0] == gtids[-1]
        started = time.monotonic()
    assert time.monotonic() - started < 2  # stop() ends a TLS connection too, at once
    client.close()


def test_tls_client_hello_in_the_ssl_requests_segment(archive, pki):
    """A client may send its TLS ClientHello right behind its SSL request (one TCP
    segment here): serve leaves it to TLS, and the login over TLS gets its OK with
    sequence id 3 (request 1, response 2), as from mariadbd."""
    import ssl
    import struct

    from mysqlbackup.source.protocol import frame
    from replay.serve import packets as pk
    tls = {"tls_cert": str(pki / "serve.pem"), "tls_key": str(pki / "serve.key")}
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    with serve(archive, tls=tls) as handle, socket.create_connection(
            (handle.host, handle.port), timeout=5) as sock:
        raw = b""
        while len(raw) < 4 or len(raw) < 4 + int.from_bytes(raw[:3], "little"):
            raw += sock.recv(4096)
        scramble = raw[4:][raw[4:].index(b"\0") + 5:][:8] + raw[-35:-23]
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        client = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
        caps = pk.CLIENT_PROTOCOL_41 | pk.CLIENT_SECURE_CONNECTION | pk.CLIENT_SSL
        start = struct.pack("<IIB", caps, 1 << 24, 8) + bytes(23)
        pending = frame(start, 1)
        while True:
            try:
                client.do_handshake()
                break
            except ssl.SSLWantReadError:
                sock.sendall(pending + outgoing.read())
                pending = b""
                incoming.write(sock.recv(65536))
        token = pk.native_token(PASSWORD, scramble)
        client.write(frame(start + b"mysqlbackup_serve\0" + bytes([len(token)]) + token, 2))
        sock.sendall(outgoing.read())
        reply = b""
        while len(reply) < 11:
            incoming.write(sock.recv(65536))
            try:
                reply += client.read(4096)
            except ssl.SSLWantReadError:
                pass
        assert (reply[3], reply[4:]) == (3, pk.ok_packet())
        assert client.version() in ("TLSv1.3", "TLSv1.2")


# -- a restart of serve in the middle of a big stream ------------------------------------

BIG = 2000  # transactions of the big stream, 4 rows of 2 KB each: 16 MB, more than
# the TCP buffers between serve and the replica hold


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory):
    """A primary of its own writes BIG transactions into a table without a primary key
    (a transaction applied twice shows as rows twice), over two binlog files, archived.
    At a fifth and at four fifths, an insert into gate.a and gate.b: tables the primary
    made without binlogging them (a replica that has them locked stops applying there;
    between them more than the replica's relay log space and socket buffers hold).
    Returns (archive URL, CHECKSUM TABLE on the primary, first, gate a's, gate b's and
    the last GTID's sequence numbers)."""
    server = module_primary(tmp_path_factory, "serve-big")
    try:
        server.execute("SET SESSION sql_log_bin = 0", "CREATE DATABASE gate",
                       "CREATE TABLE gate.a (id INT)", "CREATE TABLE gate.b (id INT)")
        server.execute("CREATE DATABASE big", "CREATE TABLE big.l (k INT, n INT, pad TEXT)")
        seqs = [_binlog_seq(server)]
        inserts = ["INSERT INTO big.l VALUES " + ",".join(
            f"({i}, {n}, REPEAT('{i}.{n}', 300))" for n in range(4)) for i in range(BIG)]
        fifth = BIG // 5
        for part, gate in ((inserts[:fifth], "a"), (inserts[fifth:4 * fifth], "b")):
            server.execute(*part, f"INSERT INTO gate.{gate} VALUES (1)")
            seqs.append(_binlog_seq(server))
            if gate == "a":
                server.execute("FLUSH BINARY LOGS")
        server.execute(*inserts[4 * fifth:])
        seqs.append(_binlog_seq(server))
        checksum = server.execute("CHECKSUM TABLE big.l")[0][1]
        files = tmp_path_factory.mktemp("serve-big-files")
        for name in server.binlog_files():
            shutil.copyfile(server.binlog_path(name), files / name)
    finally:
        server.stop(remove=True)
    url = f"file://{tmp_path_factory.mktemp('serve-big-archive')}"
    import_directory(ArchiveStore(url), str(files), "db1", echo=lambda line: None, codec=PLAIN)
    return (url, checksum, *seqs)


def _binlog_seq(server):
    return seq_no(server.execute("SELECT @@gtid_binlog_pos")[0][0])


def seq_no(gtid):
    return int(gtid.rpartition("-")[2] or 0)


def received_and_applied(replica):
    """(sequence number the replica received up to, the one it applied up to)."""
    return (seq_no(status(replica)["Gtid_IO_Pos"]),
            seq_no(replica.execute("SELECT @@gtid_slave_pos")[0][0]))


def held_lock(replica, table):
    """A connection to the replica that holds ``table`` locked (its SQL thread waits
    there; what it receives stops at its small relay log space)."""
    conn = replica.root()
    with conn.cursor() as cur:
        cur.execute(f"LOCK TABLES {table} WRITE")
    return conn


def mid_way(replica, gate, last):
    """Wait until the replica applied all before ``gate`` (and waits at it); True when
    it neither received nor applied the stream's end (checked once serve is gone)."""
    wait_for(lambda: received_and_applied(replica)[1] == gate - 1, timeout=30,
             what=f"the replica at transaction {gate - 1}")


def test_restart_of_serve_mid_stream(big_archive, replica, tmp_path):
    """serve killed (kill -9 of `mysqlbackup serve`), then stopped (ServeHandle.stop)
    while the replica is mid-way through a big stream (when serve is gone, it has
    neither received nor applied the end); serve started again on the same port each
    time: the replica reconnects by GTID by itself and ends with the primary's table,
    every transaction applied once."""
    url, checksum, first, gate_a, gate_b, last = big_archive
    replica.execute("CREATE DATABASE gate", "CREATE TABLE gate.a (id INT)",
                    "CREATE TABLE gate.b (id INT)")
    locks = [held_lock(replica, "gate.a"), held_lock(replica, "gate.b")]
    try:
        _kill_stop_and_restart(replica, big_archive, locks, tmp_path)
    finally:
        for conn in locks:
            if conn.open:
                conn.close()


def _kill_stop_and_restart(replica, big_archive, locks, tmp_path):
    url, checksum, first, gate_a, gate_b, last = big_archive
    port = free_port()
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "serve", "--archive", url,
                             "--listen", f"127.0.0.1:{port}", "--password-file",
                             str(tmp_path / "pw"), "--poll-interval", "0"],
                            env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr.readline().startswith("serving db1")
        attach(replica, SimpleNamespace(host="127.0.0.1", port=port))
        mid_way(replica, gate_a, last)
    finally:
        proc.kill()  # SIGKILL: its listener and the dump's socket go with it
        proc.wait(timeout=10)
        proc.stderr.close()
    received, applied = killed = received_and_applied(replica)
    assert first < applied == gate_a - 1 < received < last, killed
    with serve(url, ("127.0.0.1", port)) as handle:
        locks[0].close()  # the replica goes on, and reconnects by itself
        mid_way(replica, gate_b, last)
    received, applied = received_and_applied(replica)
    assert applied == gate_b - 1 < received < last and handle.dumps >= 1, (received, applied)
    with serve(url, ("127.0.0.1", port)) as handle:
        locks[1].close()
        caught_up(replica, f"0-1-{last}")
        assert replica.execute("CHECKSUM TABLE big.l")[0][1] == checksum
        assert replica.execute("SELECT COUNT(*), COUNT(DISTINCT k, n), SUM(n) FROM big.l") \
            == ((4 * BIG, 4 * BIG, 6 * BIG),)
        row = status(replica)
        assert (row["Last_IO_Errno"], row["Last_SQL_Errno"], handle.dumps) == (0, 0, 1)
