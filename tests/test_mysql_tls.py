"""TLS on every connection to a live MySQL server (9.7, Debian sid's, through chroot:
sandbox.mysql), as tests/test_tls.py does for MariaDB: stream (semi-sync) -> file://
archive -> base (MySQL's own mysqldump) -> restore into a second MySQL server, all over
TLS, against servers that refuse clear text (require_secure_transport=ON) and a user
REQUIRE X509 (caching_sha2_password, MySQL's default); clear text, a wrong CA and a
certificate for another host name refused in one line.

The certificates are tests/pki.py's. Two servers: the source's certificate names
127.0.0.1 and localhost, the target's db.example.com only (verify-ca passes,
verify-identity refuses it). mysqld and MySQL's client tools run in the tree: the
sandbox copies each server's certificate and key into its folder, and the host-side
client wrappers copy the files the tool's options file names (sandbox.mysql).

That the tool's connections are TLS is shown from the servers' side: a login of the
user without TLS, or with TLS and no client certificate, is refused (below), and the
source's performance_schema shows the daemon's Binlog Dump connection as ``SSL/TLS``
with an ``Ssl_cipher``.
"""

import json
import os
import types

import pytest

from tests.helpers import (Daemon, caught_up, current_binlog, run_cli, wait_for,
                           wait_semi_sync_source)

pytest.importorskip("cryptography.x509", reason="the test's certificates need the "
                    "cryptography package (a test dependency in setup.cfg)")
from tests.pki import make_pki  # noqa: E402

pytestmark = pytest.mark.mysql

USER, PASSWORD = "tlsuser", "tls-secret-1"
# what README documents: stream (REPLICATION SLAVE, REPLICATION CLIENT, SELECT) and
# base --method dump on MySQL (SELECT, SHOW VIEW, TRIGGER, EVENT, RELOAD or FLUSH_TABLES,
# REPLICATION CLIENT)
SOURCE_GRANTS = ("REPLICATION SLAVE, REPLICATION CLIENT, SELECT, SHOW VIEW, TRIGGER, EVENT, "
                 "FLUSH_TABLES")
# a restore's admin: it sets GTID_PURGED, loads, replays, and recreates the base's
# accounts (--users apply: each privilege WITH GRANT OPTION)
TARGET_GRANTS = "ALL"
ROWS = 500


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), USER)


def tls_mysql(pki, cert, grants, **kwargs):
    """A TLS-only MySQL server (require_secure_transport) with its certificate ``cert``
    (a stem of pki) and USER REQUIRE X509 holding ``grants``, unlogged."""
    from mysqlbackup.sandbox.mysql import MySQLSandbox
    kwargs.setdefault("gtid_mode", "ON")
    server = MySQLSandbox(files={"ca.pem": pki["ca"], "server.pem": pki[cert],
                                 "server.key": pki[f"{cert}_key"]}, **kwargs)
    server.extra_args += [f"--ssl-ca={server.inside('ca.pem')}",
                          f"--ssl-cert={server.inside('server.pem')}",
                          f"--ssl-key={server.inside('server.key')}",
                          "--require-secure-transport=ON"]
    try:
        server.start()
        server.execute("SET SESSION sql_log_bin = 0",
                       f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED WITH "
                       f"caching_sha2_password BY '{PASSWORD}' REQUIRE X509",
                       f"GRANT {grants} ON *.* TO '{USER}'@'127.0.0.1'"
                       + (" WITH GRANT OPTION" if grants == TARGET_GRANTS else ""))
    except BaseException:
        server.stop(remove=True)  # not left running by a module that never got it
        raise
    return server


def url(server):
    return f"mysql://{USER}@127.0.0.1:{server.port}"


def client_cert(pki, prefix="--ssl"):
    return [f"{prefix}-cert", pki["client"], f"{prefix}-key", pki["client_key"]]


def checksums(server):
    return server.execute("CHECKSUM TABLE shop.items, shop.orders")


def gtid_executed(server):
    return server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")


def dump_connections(server):
    """(CONNECTION_TYPE, Ssl_cipher) of each Binlog Dump connection of USER, from the
    server's side (performance_schema)."""
    return server.execute(
        "SELECT t.CONNECTION_TYPE, s.VARIABLE_VALUE FROM performance_schema.threads t "
        "JOIN performance_schema.status_by_thread s USING (THREAD_ID) "
        f"WHERE s.VARIABLE_NAME = 'Ssl_cipher' AND t.PROCESSLIST_USER = '{USER}' "
        "AND t.PROCESSLIST_COMMAND LIKE 'Binlog Dump%'")


@pytest.fixture(scope="module")
def world(pki, tmp_path_factory):
    """stream -> file:// archive -> base -> restore, every connection over TLS."""
    from mysqlbackup.sandbox.mysql import client_wrappers, why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("mysql-tls")
    w = types.SimpleNamespace(root=root, archive=f"file://{root / 'archive'}", target=None,
                              path=client_wrappers(root / "bin") + os.pathsep
                              + os.environ["PATH"])
    w.source = tls_mysql(pki, "server", SOURCE_GRANTS, semi_sync_timeout_ms=1000,
                         extra_args=["--performance-schema=ON"])
    try:
        w.target = tls_mysql(pki, "otherhost", TARGET_GRANTS, server_id=3, semi_sync=False)
        _stream_and_base(w, pki)
        w.restore = run_cli("restore", "--archive", w.archive, "--source-name", "db1",
                            "--target", url(w.target), "--target-ssl-mode", "verify-ca",
                            "--target-ssl-ca", pki["ca"], *client_cert(pki, "--target-ssl"),
                            password=PASSWORD, timeout=300, path=w.path)
        yield w
    finally:
        for server in (w.source, w.target):
            if server is not None:
                server.stop(remove=True)


def _stream_and_base(w, pki):
    source = w.source
    daemon = Daemon(types.SimpleNamespace(url=url(source)), w.root / "backup",
                    "--ssl-mode", "verify-identity", "--ssl-ca", pki["ca"], *client_cert(pki),
                    "--archive", w.archive, "--archive-interval", "0.3",
                    "--source-name", "db1", password=PASSWORD).start()
    try:
        wait_semi_sync_source(source)
        acked = int(source.status("Rpl_semi_sync_source_yes_tx"))
        source.execute("CREATE DATABASE shop",
                       "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40))",
                       "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, qty INT)",
                       "INSERT INTO shop.items WITH RECURSIVE s (n) AS (SELECT 1 UNION ALL "
                       f"SELECT n + 1 FROM s WHERE n < {ROWS}) SELECT n, CONCAT('item ', n) "
                       "FROM s")
        w.semi_sync_acked = int(source.status("Rpl_semi_sync_source_yes_tx")) - acked
        w.dump_connections = wait_for(lambda: dump_connections(source),
                                      what="the daemon's dump connection")
        w.base = run_cli("base", "--source", url(source), "--archive", w.archive,
                         "--source-name", "db1", "--ssl-mode", "verify-identity",
                         "--ssl-ca", pki["ca"], *client_cert(pki), password=PASSWORD,
                         timeout=120, path=w.path)
        source.execute(*[f"INSERT INTO shop.orders (qty) VALUES ({i})" for i in range(50)],
                       "UPDATE shop.items SET name = 'renamed' WHERE id % 7 = 0")
        w.final, w.final_gtids = checksums(source), gtid_executed(source)
        wait_for(lambda: caught_up(source, w.root / "backup"), what="the daemon caught up")
        last = current_binlog(source)
        size = os.path.getsize(source.binlog_path(last))
        archived = w.root / "archive" / "db1" / "partial" / last
        wait_for(lambda: archived.is_dir() and any(
            n.endswith(f"-{size:012d}.json") for n in os.listdir(archived)), timeout=60,
            what="the archive to hold the last transaction")
    finally:
        w.daemon_exit = daemon.stop()
        w.daemon_output = daemon.output()


# -- the whole path over TLS --------------------------------------------------------------

def test_the_user_logs_in_only_over_tls_with_its_certificate(world, pki):
    """What makes every success below a TLS connection with the client certificate: both
    servers refuse USER's login in clear text, and over TLS without a client certificate
    (1045: MySQL checks REQUIRE X509 before require_secure_transport), and any other
    user's clear-text login before it is checked (3159, require_secure_transport)."""
    import pymysql

    from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
    for server in (world.source, world.target):
        for user, password, tls, code in (
                (USER, PASSWORD, {"ssl_disabled": True}, 1045),
                (USER, PASSWORD, {"ssl_ca": pki["ca"]}, 1045),
                (REPL_USER, REPL_PASSWORD, {"ssl_disabled": True}, 3159)):
            with pytest.raises(pymysql.err.OperationalError) as e:
                pymysql.connect(host="127.0.0.1", port=server.port, user=user,
                                password=password, **tls)
            assert e.value.args[0] == code, (user, tls, e.value.args)
        with pymysql.connect(host="127.0.0.1", port=server.port, user=USER,
                             password=PASSWORD, ssl_ca=pki["ca"], ssl_cert=pki["client"],
                             ssl_key=pki["client_key"]) as conn, conn.cursor() as cur:
            cur.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            assert cur.fetchone()[1].startswith("TLSv1."), server


def test_stream_base_restore_all_over_tls(world):
    assert world.daemon_exit == 0, world.daemon_output
    assert world.semi_sync_acked == 4  # CREATE DATABASE, two CREATE TABLE, the INSERT
    assert [kind for kind, _ in world.dump_connections] == ["SSL/TLS"], world.dump_connections
    assert all(cipher for _, cipher in world.dump_connections), world.dump_connections
    assert world.base.returncode == 0, world.base.stderr
    assert world.base.stdout.startswith("base "), world.base.stdout
    [manifest] = (world.root / "archive" / "db1" / "base").glob("*/index.json")
    details = json.loads(manifest.read_text())["details"]
    assert details["tool_version"].startswith("mysqldump Ver 9."), details  # MySQL's own
    assert world.restore.returncode == 0, world.restore.stderr + world.restore.stdout
    assert checksums(world.target) == world.final
    assert world.target.execute("SELECT COUNT(*) FROM shop.items")[0][0] == ROWS
    assert gtid_executed(world.target) == world.final_gtids


# -- refusals: one line each --------------------------------------------------------------

def one_error_line(result, code, only=True):
    """The one error line (the only line on stderr, or with ``only=False`` the last one,
    after progress lines) of a command that exited ``code``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert [line for line in lines if line.startswith("mysqlbackup: error:")] == lines[-1:]
    assert len(lines) == 1 or not only, result.stderr
    return lines[-1]


def test_ssl_mode_disabled_against_require_secure_transport(world, tmp_path):
    """USER (REQUIRE X509) is denied as on MariaDB, and the hint says why; a user without
    REQUIRE gets MySQL's own error 3159, which names require_secure_transport itself."""
    from mysqlbackup.sandbox import REPL_PASSWORD
    port = world.source.port
    hint = (f"mysqlbackup: error: access denied for {USER}@127.0.0.1:{port}: clear text "
            f"(--ssl-mode disabled) is refused by a server with require_secure_transport=ON "
            f"and for a user REQUIRE SSL/X509; else check the password")
    stream = run_cli("stream", "--source", url(world.source), "--server-id", "91", "--dir",
                     str(tmp_path / "d"), "--ssl-mode", "disabled", password=PASSWORD)
    assert one_error_line(stream, 3).startswith(hint)
    base = run_cli("base", "--source", url(world.source), "--archive", world.archive,
                   "--source-name", "db1", "--ssl-mode", "disabled", password=PASSWORD,
                   path=world.path)
    assert one_error_line(base, 3).startswith(hint)
    said = ("Connections using insecure transport are prohibited while "
            "--require_secure_transport=ON.")
    stream = run_cli("stream", "--source", world.source.url, "--server-id", "91", "--dir",
                     str(tmp_path / "e"), "--ssl-mode", "disabled", password=REPL_PASSWORD)
    assert one_error_line(stream, 3) == (
        f"mysqlbackup: error: cannot log in to 127.0.0.1:{port}: {said}")
    base = run_cli("base", "--source", world.source.url, "--archive", world.archive,
                   "--source-name", "db1", "--ssl-mode", "disabled", password=REPL_PASSWORD,
                   path=world.path)
    assert one_error_line(base, 3) == (
        f"mysqlbackup: error: cannot connect to 127.0.0.1:{port}: {said}")


def test_wrong_ca_names_the_certificate_problem(world, pki, tmp_path):
    port = world.source.port
    wrong = ["--ssl-mode", "verify-ca", "--ssl-ca", pki["wrongca"], *client_cert(pki)]
    start = (f"mysqlbackup: error: TLS: the certificate of 127.0.0.1:{port} was refused "
             f"(--ssl-mode verify-ca, --ssl-ca {pki['wrongca']}): ")
    stream = run_cli("stream", "--source", url(world.source), "--server-id", "92", "--dir",
                     str(tmp_path / "d"), *wrong, password=PASSWORD)
    line = one_error_line(stream, 3)  # at once: a certificate problem is not retried
    assert line.startswith(start) and "certificate" in line[len(start):], line
    base = run_cli("base", "--source", url(world.source), "--archive", world.archive,
                   "--source-name", "db1", *wrong, password=PASSWORD, path=world.path)
    assert one_error_line(base, 3) == line


def test_verify_identity_refuses_a_certificate_for_another_host(world, pki):
    restore = run_cli("restore", "--archive", world.archive, "--source-name", "db1",
                      "--target", url(world.target), "--target-ssl-mode", "verify-identity",
                      "--target-ssl-ca", pki["ca"], *client_cert(pki, "--target-ssl"),
                      password=PASSWORD, path=world.path)
    port = world.target.port
    assert one_error_line(restore, 3, only=False) == (
        f"mysqlbackup: error: cannot connect to the target 127.0.0.1:{port}: TLS: the "
        f"certificate of 127.0.0.1:{port} is not valid for that host name "
        f"(--target-ssl-mode verify-identity): IP address mismatch, certificate is not "
        f"valid for '127.0.0.1'.")


def test_a_verify_identity_restore_loads_with_mysqls_option_names(world, pki):
    """The base is loaded by MySQL's own client with MySQL's TLS option names
    (``ssl-mode=VERIFY_IDENTITY``): MariaDB's (``ssl-verify-server-cert``) made it exit
    "unknown option" after the tool's own connection had passed."""
    target = tls_mysql(pki, "server", TARGET_GRANTS, server_id=4, semi_sync=False)
    try:
        done = run_cli("restore", "--archive", world.archive, "--source-name", "db1",
                       "--target", url(target), "--target-ssl-mode", "verify-identity",
                       "--target-ssl-ca", pki["ca"], *client_cert(pki, "--target-ssl"),
                       password=PASSWORD, timeout=300, path=world.path)
        assert done.returncode == 0, done.stderr + done.stdout
        assert checksums(target) == world.final
    finally:
        target.stop(remove=True)
