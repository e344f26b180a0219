"""`mysqlbackup serve` with TLS: a real replica with MASTER_SSL=1 that checks serve's
certificate gets everything over TLS, clear text is denied under --require-secure-transport, and a
ClientHello sent in the SSL request's own TCP segment is not lost."""

import logging
import socket
import time

import pymysql
import pytest

from tests.helpers import wait_for
from tests.serve.world import PASSWORD, attach, caught_up, checksums, serve, status

# -- TLS ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and serve's certificate for 127.0.0.1 (tests/pki.py makes them)."""
    import ipaddress

    from cryptography import x509

    from tests.pki import issue
    d = tmp_path_factory.mktemp("serve-pki")
    ca = issue(d, "ca", "serve test CA", ca=True)
    issue(d, "serve", "serve", ca, sans=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    return d


def test_tls_replica_gets_it_all_and_clear_text_is_denied(primary, archive, replica, pki,
                                                          caplog):
    """--ssl-cert with --require-secure-transport: a replica with MASTER_SSL=1 that checks serve's
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
        assert any("clear text refused (--require-secure-transport)" in r.getMessage()
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
    sequence id 3 (request 1, response 2), as from mariadbd, the certificate's proof in
    it (what a MariaDB 11.4+ client checks a certificate it cannot chain by)."""
    import ssl
    import struct

    from mysqlbackup.source.protocol import frame
    from replay.serve.protocol import packets as pk
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
        while len(reply) < 4 or len(reply) < 4 + int.from_bytes(reply[:3], "little"):
            incoming.write(sock.recv(65536))
            try:
                reply += client.read(4096)
            except ssl.SSLWantReadError:
                pass
        from replay.serve.protocol.certs import cert_proof, fingerprint
        proof = cert_proof(pk.password_hash(PASSWORD), scramble,
                           fingerprint((pki / "serve.pem").read_bytes()))
        assert (reply[3], reply[4:]) == (3, pk.ok_packet(proof))
        assert client.version() in ("TLSv1.3", "TLSv1.2")


def test_clients_stalled_in_the_tls_handshake_are_evicted(archive, pki):
    """Connections that ask for TLS and then send no ClientHello hold a handshake slot only
    until newer ones come: evicting them reaches the socket mid-TLS-handshake, so they
    never fill the server and a replica still logs in (was: 1040 for every newcomer)."""
    from replay.serve.protocol import packets as pk
    from replay.serve.protocol.limits import MAX_HANDSHAKES
    from tests.serve import rawclient as rc
    tls = {"tls_cert": str(pki / "serve.pem"), "tls_key": str(pki / "serve.key")}
    stalled = []
    with serve(archive, tls=tls) as handle:
        try:
            for i in range(MAX_HANDSHAKES + 64):
                sock = rc.connect(handle.port, f"127.0.1.{i % 200 + 1}")
                rc.greeting(sock)
                ssl_request = struct_ssl_request()
                rc.send_packet(sock, ssl_request, 1)
                stalled.append(sock)
            wait_for(lambda: handle.connections <= MAX_HANDSHAKES, timeout=5,
                     what=f"at most {MAX_HANDSHAKES} open (now {handle.connections})")
            sock, answer = rc.login(handle.port, "mysqlbackup_serve", PASSWORD)
            sock.close()
            assert answer[:1] == b"\x00", answer
            assert handle.stats["evicted"] >= 64
            assert pk.ER_CON_COUNT_ERROR not in [code for code, _ in handle.errors]
        finally:
            for sock in stalled:
                sock.close()


def struct_ssl_request():
    """The 32 bytes of a client's SSL request (capabilities with CLIENT_SSL)."""
    import struct

    from replay.serve.protocol import packets as pk
    from tests.serve import rawclient as rc
    return struct.pack("<IIB23x", rc.CAPS | pk.CLIENT_SSL, 1 << 24, pk.CHARSET_LATIN1)
