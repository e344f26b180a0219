"""``mysqlbackup serve`` over a MySQL source's archive, served as a MySQL primary: our
ReplicaClient gets byte for byte what the real mysqld sends from the same binlogs (an
empty GTID set, a mid-archive set, a tagged set, a file:position); a real MySQL replica
with SOURCE_AUTO_POSITION=1 replicates from it over TLS and without (caching_sha2_password
through the RSA key exchange) to the source's data and gtid_executed; a wrong password
gets 1045 and a GTID set the archive lacks 1236, as mysqld words them."""

import logging
import shutil
import struct
import time

import pymysql
import pytest

from mysqlbackup.archive.codec import PLAIN
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
from mysqlbackup.source import protocol
from mysqlbackup.source.spec import SourceSpec
from replay.serve.server import ServeOptions, start_server
from tests.helpers import selection_of, wait_for
from tests.serve import rawclient
from tests.serve.world import PatientClient, gtid_executed

pytestmark = pytest.mark.mysql

USER, PASSWORD = "mysqlbackup_serve", "serve-secret"
HEARTBEAT = 0.2


def checksums(server):
    return [server.execute(f"CHECKSUM TABLE d.{t}")[0][1] for t in ("t", "u")]


def serve(url, **options):
    selection = selection_of(**options.pop("selection", {}))
    return start_server(ServeOptions(url, "my1", ("127.0.0.1", 0), USER, PASSWORD, selection,
                                     **options))


def dump(port, user, password, start, server_id=77, last=None):
    """The events our ReplicaClient receives from 127.0.0.1:``port`` for ``start`` (a
    GTID set text, or (file, pos)) up to the first heartbeat naming ``last`` (file,
    pos): the whole dump, artificial events included."""
    client = PatientClient(SourceSpec("127.0.0.1", port, user, password), server_id,
                           semi_sync=False, heartbeat=HEARTBEAT)
    client.connect()
    try:
        if isinstance(start, tuple):
            client.start_dump(*start)
        else:
            client._prepare_dump()
            client._send(protocol.binlog_dump_gtid_payload(
                server_id, MysqlGtidSet.parse(start) if start else MysqlGtidSet()))
            client._new_decoder()
            client.position_hint = (f"GTID {start}", 4)
        events, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            for event, _ in protocol.split_batch(client.read_batch(0.5)):
                events.append(bytes(event))
                if event[4] in (27, 41) and _beat_at(bytes(event)) == last:
                    return events
        raise AssertionError(f"no heartbeat at {last} within 30 s: {len(events)} events")
    finally:
        client.close()


def _beat_at(event):
    """(file, pos) a heartbeat names (either version)."""
    from mysqlbackup.binlog import events as ev
    body = event[19:-4]
    if event[4] == 27:
        return body.decode(), ev.parse_header(event).log_pos
    name = body[2:2 + body[1]].decode()
    rest = body[2 + body[1]:]
    return name, int.from_bytes(rest[3:3 + rest[1] - 1], "little") if rest[2] == 0xFC \
        else rest[2]


def archive_end(world):
    last = sorted(p.name for p in world["files"].iterdir() if p.name.startswith("binlog."))
    last = [n for n in last if n != "binlog.index"][-1]
    return last, (world["files"] / last).stat().st_size


@pytest.mark.parametrize("start", ["empty", "first file", "mid file", "tagged", "position"])
def test_the_same_events_as_mysqld(world, start):
    """From each starting point, ReplicaClient receives from serve exactly the bytes the
    real mysqld sends from the same binlogs (fake ROTATEs, format descriptions,
    PREVIOUS_GTIDS, the heartbeat after skipped transactions, the end's heartbeats)."""
    source = world["source"]
    uuid = source.execute("SELECT @@server_uuid")[0][0]
    where = {"empty": "", "first file": world["mid"], "mid file": world["mid2"],
             "tagged": world["mid2"] + f",{uuid}:nightly:1", "position": world["position"]}
    at = where[start]
    last = archive_end(world)
    real = dump(source.port, REPL_USER, REPL_PASSWORD, at, last=last)
    with serve(world["url"]) as handle:
        ours = dump(handle.port, USER, PASSWORD, at, last=last)
    assert [e[4] for e in ours] == [e[4] for e in real]
    assert ours == real
    assert len(real) > 10


def replica_of(make_mysql):
    return make_mysql(server_id=5, semi_sync=False)


def attach(replica, handle, extra=""):
    replica.execute(
        f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT={handle.port}, "
        f"SOURCE_USER='{USER}', SOURCE_PASSWORD='{PASSWORD}', SOURCE_AUTO_POSITION=1, "
        f"SOURCE_CONNECT_RETRY=1, SOURCE_HEARTBEAT_PERIOD=0.5{extra}", "START REPLICA")


def io_status(replica):
    conn = replica.root()
    try:
        with conn.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW REPLICA STATUS")
            return cur.fetchone()
    finally:
        conn.close()


def caught_up(replica, gtids):
    wait_for(lambda: gtid_executed(replica) == gtids, timeout=30,
             what=f"the replica at {gtids} ({io_status(replica)})")


def test_a_real_replica_by_auto_position_rsa_without_tls(world, make_mysql, caplog):
    """No TLS: caching_sha2_password's full authentication through the RSA key exchange
    (GET_SOURCE_PUBLIC_KEY=1), then by SOURCE_AUTO_POSITION=1 to the source's data and
    gtid_executed, every query its I/O thread sent answered (those seen on the wire
    from mysqld 9.7's replica); reconnected, the fast authentication and nothing
    applied twice."""
    caplog.set_level(logging.DEBUG, logger="replay.serve")
    replica = replica_of(make_mysql)
    with serve(world["url"]) as handle:
        attach(replica, handle, ", SOURCE_SSL=0, GET_SOURCE_PUBLIC_KEY=1")
        caught_up(replica, world["end"])
        assert checksums(replica) == checksums(world["source"])
        assert io_status(replica)["Replica_IO_Running"] == "Yes"
        queries = [r.getMessage() for r in caplog.records if ": query " in r.getMessage()]
        assert [q for q in queries if not q.endswith(": rows") and not q.endswith(": ok")] \
            == []
        for sent in ("SELECT @@GLOBAL.SERVER_ID", "SELECT @@GLOBAL.GTID_MODE",
                     "SELECT @@GLOBAL.SERVER_UUID", "SELECT @source_binlog_checksum",
                     "SET @master_heartbeat_period = 500000000, @source_heartbeat_period"):
            assert any(sent in q for q in queries), (sent, queries)
        assert handle.dump_tls == [None]
        replica.execute("STOP REPLICA", "START REPLICA")
        wait_for(lambda: handle.dumps == 2, what="the second dump")
        caught_up(replica, world["end"])
        assert checksums(replica) == checksums(world["source"])


def test_a_stop_point_and_an_exclusion(world, make_mysql):
    """--stop-before-gtid: the replica holds what came before it and stays connected
    (heartbeats); --exclude-gtids: that transaction goes empty (its GTID, BEGIN and
    commit), so the replica's gtid_executed has no gap and nothing of it is applied."""
    uuid = world["source"].execute("SELECT @@server_uuid")[0][0]
    replica = replica_of(make_mysql)
    selection = {"stop_before_gtid": f"{uuid}:12", "exclude_gtids": f"{uuid}:9"}
    with serve(world["url"], selection=selection) as handle:
        attach(replica, handle, ", SOURCE_SSL=0, GET_SOURCE_PUBLIC_KEY=1")
        caught_up(replica, f"{uuid}:1-11:nightly:1-2")
        assert handle.wait_end(5).reason == f"stop before GTID {uuid}:12"
        assert replica.execute("SELECT id, v FROM d.t ORDER BY id") == tuple(
            (i, i) for i in range(8))  # the UPDATE (uuid:9) was sent empty
        assert replica.execute("SELECT a FROM d.u") == ((1,),)
        row = io_status(replica)
        assert (row["Replica_IO_Running"], row["Last_IO_Errno"]) == ("Yes", 0)


def test_a_real_replica_over_tls_and_from_mid_archive(world, make_mysql, tmp_path):
    """SOURCE_SSL=1 checking serve's certificate: full authentication in clear over TLS;
    a replica holding the first file's GTIDs gets only the rest."""
    import ipaddress

    from cryptography import x509

    from tests.pki import issue
    ca = issue(tmp_path, "ca", "serve test CA", ca=True)
    issue(tmp_path, "serve", "serve", ca, sans=[x509.IPAddress(ipaddress.ip_address(
        "127.0.0.1"))])
    # mysqld runs in the MySQL tree: the CA file is copied into the replica's folder there
    replica = make_mysql(server_id=5, semi_sync=False, files={"ca.pem": tmp_path / "ca.pem"})
    replica.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY, v INT)",
                    *[f"INSERT INTO d.t VALUES ({i}, {i})" for i in range(5)], "RESET BINARY "
                    "LOGS AND GTIDS", f"SET GLOBAL gtid_purged = '{world['mid']}'")
    tls = {"tls_cert": str(tmp_path / "serve.pem"), "tls_key": str(tmp_path / "serve.key"),
           "require_tls": True}
    with serve(world["url"], **tls) as handle:
        attach(replica, handle, f", SOURCE_SSL=1, SOURCE_SSL_CA='{replica.inside('ca.pem')}', "
               "SOURCE_SSL_VERIFY_SERVER_CERT=1")
        caught_up(replica, world["end"])
        assert checksums(replica) == checksums(world["source"])
        assert handle.dump_tls in (["TLSv1.3"], ["TLSv1.2"])


def test_wrong_password_1045_and_purged_1236_as_mysqld(world, make_mysql, tmp_path):
    """A wrong password: 1045 in mysqld's words (ReplicaClient, a raw client and a real
    replica); an archive without the first file, asked for everything: 1236 with the
    text mysqld sends once it purged that file; mysql_native_password accepted."""
    source = world["source"]
    with serve(world["url"]) as handle:
        sock, answer = rawclient.login(handle.port, USER, "wrong")
        sock.close()
        assert rawclient.error_of(answer) == (1045, (
            "Access denied for user 'mysqlbackup_serve'@'127.0.0.1' (using password: YES)"))
        sock, answer = rawclient.login(handle.port, USER, PASSWORD)  # mysql_native_password
        sock.close()
        assert answer[:1] == b"\x00"
        with pytest.raises(MysqlBackupError, match="denied|Access denied"):
            dump(handle.port, USER, "wrong", "", last=("x", 0))
        replica = replica_of(make_mysql)
        replica.execute(f"CHANGE REPLICATION SOURCE TO SOURCE_HOST='127.0.0.1', SOURCE_PORT="
                        f"{handle.port}, SOURCE_USER='{USER}', SOURCE_PASSWORD='bad', "
                        "SOURCE_AUTO_POSITION=1, SOURCE_SSL=0, GET_SOURCE_PUBLIC_KEY=1, "
                        "SOURCE_CONNECT_RETRY=1", "START REPLICA")
        wait_for(lambda: io_status(replica)["Last_IO_Errno"] == 1045, timeout=20,
                 what="1045 on the replica")
        replica.execute("STOP REPLICA", "RESET REPLICA ALL")
    later = tmp_path / "later"
    later.mkdir()
    for path in sorted(world["files"].iterdir())[-2:]:  # the first file with GTIDs left out
        shutil.copyfile(path, later / path.name)
    url = f"file://{tmp_path / 'archive'}"
    import_directory(ArchiveStore(url), str(later), "my1", echo=lambda line: None,
                     codec=PLAIN)
    with serve(url) as handle:
        with pytest.raises(MysqlBackupError) as ours:
            dump(handle.port, USER, PASSWORD, "", last=("x", 0))
        assert handle.errors and handle.errors[0][0] == 1236
        attach(replica, handle, ", SOURCE_SSL=0, GET_SOURCE_PUBLIC_KEY=1")
        wait_for(lambda: io_status(replica)["Last_IO_Errno"] == 13114, timeout=20,
                 what="the replica's error for 1236")
    source.execute(f"PURGE BINARY LOGS TO '{min(p.name for p in later.iterdir())}'")
    with pytest.raises(MysqlBackupError) as real:
        dump(source.port, REPL_USER, REPL_PASSWORD, "", last=("x", 0))
    message = handle.errors[0][1]
    assert message.startswith("Cannot replicate because the source purged required binary "
                              "logs.") and message.endswith("'")
    assert message in str(ours.value) and message in str(real.value)  # mysqld's very words


# -- hostile clients: the MariaDB side's bounds hold for the MySQL side ---------------

def sha2_response(user, auth):
    """A HandshakeResponse41 naming caching_sha2_password."""
    head = struct.pack("<IIB23x", rawclient.CAPS, 1 << 24, 255)
    return head + user + b"\0" + bytes([len(auth)]) + auth + b"caching_sha2_password\0"


def test_hostile_logins_and_dumps_get_mysqld_errors(world, tmp_path, caplog):
    """caching_sha2_password's steps by hand: a wrong fast token before the user logged
    in fully asks for full authentication, the public key is sent on request (the key
    of --rsa-key), a password that does not decrypt is 1045; the right one encrypted
    logs in and later logins take the fast path; a COM_BINLOG_DUMP_GTID whose GTID set
    is cut short or names a billion entries gets 1236; a login packet over 64 KiB gets
    1153; serve stays up and never logs a traceback."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import padding

    from replay.serve.protocol import mysql as my
    key = my.new_rsa_key()
    pem = tmp_path / "serve-rsa.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                      serialization.PrivateFormat.PKCS8,
                                      serialization.NoEncryption()))
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)

    def full_login(handle, password):
        sock = rawclient.connect(handle.port)
        scramble = rawclient.greeting(sock)
        rawclient.send_packet(sock, sha2_response(USER.encode(), my.sha2_token(
            "not it", scramble)), 1)
        assert rawclient.read_packet(sock) == (2, b"\x01\x04")  # perform full authentication
        rawclient.send_packet(sock, b"\x02", 3)
        seq, public = rawclient.read_packet(sock)
        assert seq == 4 and public[1:] == my.public_pem(key)
        secret = key.public_key().encrypt(my.xor_scramble(password.encode() + b"\0",
                                                          scramble), oaep)
        rawclient.send_packet(sock, secret, 5)
        return sock, rawclient.read_packet(sock)

    with serve(world["url"], rsa_key=str(pem)) as handle:
        sock, (seq, answer) = full_login(handle, "wrong")
        sock.close()
        assert (seq, rawclient.error_of(answer)[0]) == (6, 1045)
        sock, (seq, answer) = full_login(handle, PASSWORD)
        sock.close()
        assert (seq, answer[:1]) == (6, b"\x00")
        sock = rawclient.connect(handle.port)  # now the fast path
        scramble = rawclient.greeting(sock)
        rawclient.send_packet(sock, sha2_response(USER.encode(), my.sha2_token(
            PASSWORD, scramble)), 1)
        assert rawclient.read_packet(sock) == (2, b"\x01\x03")
        assert rawclient.read_packet(sock)[1][:1] == b"\x00"
        for blob in (b"\x05", struct.pack("<Q", 10**9) + bytes(40)):
            payload = (b"\x1e" + struct.pack("<HII", 4, 99, 0) + struct.pack("<QI", 4, len(blob))
                       + blob)
            rawclient.send_packet(sock, payload, 0)
            code, message = rawclient.error_of(rawclient.read_packet(sock)[1])
            assert code == 1236 and "COM_BINLOG_DUMP_GTID" in message, message
            assert rawclient.closed_by_server(sock, 5)
            sock.close()
            sock, answer = rawclient.login(handle.port, USER, PASSWORD)
            assert answer[:1] == b"\x00"
        sock.close()
        sock = rawclient.connect(handle.port)
        rawclient.greeting(sock)
        sock.sendall(struct.pack("<I", 100 << 10)[:3] + b"\x01" + bytes(1024))
        assert rawclient.error_of(rawclient.read_packet(sock)[1])[0] == 1153
        sock.close()
        assert handle.stats["too_large"] == 1 and handle.stats["refused_logins"] == 1
        sock, answer = rawclient.login(handle.port, USER, PASSWORD)
        sock.close()
        assert answer[:1] == b"\x00"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_stock_replica_given_no_tls_option_connects_over_serves_own_certificate(
        world, make_mysql):
    """CHANGE REPLICATION SOURCE as a new MySQL 9.7 replica takes it, no SOURCE_SSL nor
    GET_SOURCE_PUBLIC_KEY: it asks for TLS, and serve, given no certificate, offers the
    one it made at its start (caching_sha2_password's full authentication then goes in
    clear over TLS)."""
    replica = replica_of(make_mysql)
    with serve(world["url"]) as handle:
        attach(replica, handle)
        caught_up(replica, world["end"])
        assert checksums(replica) == checksums(world["source"])
        assert handle.dump_tls[0].startswith("TLSv1.")
