"""TLS on every connection to a server: stream, base, restore over TLS against servers
that refuse clear text (require_secure_transport=ON) and a user REQUIRE X509; clear
text, a wrong CA and a certificate for another host name refused in one line; the
mapping of --ssl-mode to PyMySQL and to the MariaDB tools' options (pure).

The test makes its own CA, server and client certificates (the ``cryptography``
package). Two servers: the source's certificate names 127.0.0.1 and localhost, the
target's names db.example.com only (verify-ca passes, verify-identity refuses it).

That the tool's connections are TLS is shown twice: the server refuses any login of
the user without TLS and a client certificate (the user is REQUIRE X509 and the server
runs require_secure_transport=ON; a clear-text login of that user is refused below),
and the source's performance_schema shows the daemon's Binlog Dump thread with an
``Ssl_cipher`` (the per-connection status, read from the server's side).
"""

import os
import types

import pytest
from click.testing import CliRunner

from mysqlbackup.base.client import options_text
from mysqlbackup.cli import main
from mysqlbackup.errors import UsageError
from mysqlbackup.sandbox import MariaDBSandbox, find_binary
from mysqlbackup.source.spec import SourceSpec
from mysqlbackup.source.tls import TlsSettings, client_options, context_args, pymysql_mode
from tests.helpers import Daemon, caught_up, current_binlog, run_cli, wait_for

pytest.importorskip("cryptography.x509", reason="the test's certificates need the "
                    "cryptography package (a test dependency in setup.cfg)")
from tests.pki import make_pki  # noqa: E402

USER, PASSWORD = "tlsuser", "tls-secret-1"


# -- the mapping (pure) -------------------------------------------------------------------

def test_modes_map_to_pymysql_and_to_the_mariadb_tools():
    ca, cert, key = "/pki/ca.pem", "/pki/client.pem", "/pki/client.key"
    expected = {
        # mode: (PyMySQL mode, chain checked, host checked, tools' options)
        "disabled": ("disabled", False, False, [("skip-ssl", None)]),
        "preferred": ("preferred", False, False,
                      [("ssl", None), ("ssl-cert", cert), ("ssl-key", key)]),
        "required": ("required", False, False,
                     [("ssl", None), ("ssl-cert", cert), ("ssl-key", key)]),
        "verify-ca": ("required", True, False,
                      [("ssl", None), ("ssl-ca", ca), ("ssl-cert", cert), ("ssl-key", key)]),
        "verify-identity": ("required", True, True,
                            [("ssl", None), ("ssl-ca", ca), ("ssl-cert", cert),
                             ("ssl-key", key), ("ssl-verify-server-cert", None)]),
    }
    for mode, (pymysql, chain, host, tools) in expected.items():
        tls = (TlsSettings(mode) if mode == "disabled" else TlsSettings(mode, ca, cert, key))
        assert pymysql_mode(tls) == pymysql, mode
        args = context_args(tls)
        assert (args["verify"], args["check_hostname"]) == (chain, host), mode
        assert args["cafile"] == (ca if chain else None), mode  # required: no CA check
        assert client_options(tls) == tools, mode
    assert client_options(TlsSettings()) == [("ssl", None)]
    assert TlsSettings().mode == "preferred"  # the MySQL client's default


def test_options_file_carries_the_tls_options():
    spec = SourceSpec("db1", 3306, "u", "p w", TlsSettings("verify-identity", '/a "b"/ca.pem'))
    assert options_text(spec).splitlines() == [
        "[client]", 'user="u"', 'password="p w"', "ssl", 'ssl-ca="/a \\"b\\"/ca.pem"',
        "ssl-verify-server-cert"]
    assert options_text(SourceSpec("h", 1, "u", "", TlsSettings("disabled"))).splitlines()[
        -1] == "skip-ssl"


@pytest.mark.parametrize("kwargs, problem", [
    ({"mode": "verify-ca"}, "--ssl-mode verify-ca needs --ssl-ca"),
    ({"mode": "verify-identity", "option": "--target-ssl"},
     "--target-ssl-mode verify-identity needs --target-ssl-ca"),
    ({"mode": "required", "key": "k.pem"}, "--ssl-key needs --ssl-cert"),
    ({"mode": "disabled", "cert": "c.pem"}, "--ssl-mode disabled uses no certificate"),
    ({"mode": "verify_ca", "ca": "ca.pem"}, "--ssl-mode must be one of disabled, preferred"),
])
def test_bad_combinations_are_refused(kwargs, problem):
    with pytest.raises(UsageError) as e:
        TlsSettings(**kwargs)
    assert str(e.value).startswith(problem)


def test_cli_takes_the_mysql_spelling_and_refuses_a_mode_without_its_ca(tmp_path):
    result = CliRunner().invoke(main, ["base", "--source", "mysql://u@127.0.0.1:1",
                                       "--ssl-mode", "VERIFY_IDENTITY", "--archive",
                                       f"file://{tmp_path}"])
    assert result.exit_code == 2
    assert "--ssl-mode verify-identity needs --ssl-ca" in result.output
    result = CliRunner().invoke(main, ["base", "--source", "mysql://u@127.0.0.1:1",
                                       "--ssl-mode", "sometimes"])
    assert result.exit_code == 2 and "'sometimes' is not one of disabled" in result.output


# -- certificates and servers -------------------------------------------------------------

@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """Paths of the CA, server (127.0.0.1/localhost), other host, client and wrong CA
    (tests.pki)."""
    return make_pki(tmp_path_factory.mktemp("pki"), USER)


def tls_server(root, pki, cert, **kwargs):
    """A TLS-only server (require_secure_transport) with USER REQUIRE X509, unlogged (an admin
    like root: a dump base replays the source's GRANTs, GRANT PROXY too, into the target)."""
    d = os.path.dirname(pki["ca"])
    server = MariaDBSandbox(str(root), extra_args=[
        f"--ssl-ca={pki['ca']}", f"--ssl-cert={d}/{cert}.pem", f"--ssl-key={d}/{cert}.key",
        "--require-secure-transport=ON", *kwargs.pop("extra", ())], **kwargs).start()
    server.execute("SET SESSION sql_log_bin = 0",
                   f"CREATE USER '{USER}'@'127.0.0.1' IDENTIFIED BY '{PASSWORD}' REQUIRE X509",
                   f"GRANT ALL ON *.* TO '{USER}'@'127.0.0.1' WITH GRANT OPTION",
                   f"GRANT PROXY ON ''@'%' TO '{USER}'@'127.0.0.1' WITH GRANT OPTION")
    return server


def url(server):
    return f"mysql://{USER}@127.0.0.1:{server.port}"


def client_cert(pki, prefix="--ssl"):
    return [f"{prefix}-cert", pki["client"], f"{prefix}-key", pki["client_key"]]


def checksums(server):
    return server.execute("CHECKSUM TABLE shop.items, shop.orders")


def dump_thread_ciphers(server):
    """Ssl_cipher of each Binlog Dump connection of USER, from the server's side."""
    return [row[0] for row in server.execute(
        "SELECT s.VARIABLE_VALUE FROM performance_schema.status_by_thread s JOIN "
        "performance_schema.threads t USING (THREAD_ID) WHERE s.VARIABLE_NAME = 'Ssl_cipher' "
        f"AND t.PROCESSLIST_USER = '{USER}' AND t.PROCESSLIST_COMMAND = 'Binlog Dump'")]


@pytest.fixture(scope="module")
def world(pki, tmp_path_factory):
    """stream -> file:// archive -> base -> restore, every connection over TLS."""
    if find_binary("mariadbd") is None:
        pytest.fail("mariadbd not found: run scripts/test.sh, which installs mariadb-server")
    root = tmp_path_factory.mktemp("tls")
    source = tls_server(root / "source", pki, "server", semi_sync_timeout_ms=1000,
                        extra=["--performance-schema=ON"])
    target = tls_server(root / "target", pki, "otherhost", server_id=3, semi_sync=False)
    archive = f"file://{root / 'archive'}"
    w = types.SimpleNamespace(source=source, target=target, archive=archive, root=root)
    try:
        _stream_and_base(w, pki)
        w.restore = run_cli("restore", "--archive", archive, "--source-name", "db1",
                            "--target", url(target), "--target-ssl-mode", "verify-ca",
                            "--target-ssl-ca", pki["ca"], *client_cert(pki, "--target-ssl"),
                            password=PASSWORD, timeout=300)
        yield w
    finally:
        source.stop(remove=True)
        target.stop(remove=True)


def _stream_and_base(w, pki):
    source = w.source
    daemon = Daemon(types.SimpleNamespace(url=url(source)), w.root / "backup",
                    "--ssl-mode", "verify-identity", "--ssl-ca", pki["ca"], *client_cert(pki),
                    "--archive", w.archive, "--archive-interval", "0.3",
                    "--source-name", "db1", password=PASSWORD).start()
    try:
        source.execute("CREATE DATABASE shop",
                       "CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(40))",
                       "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, qty INT)",
                       "INSERT INTO shop.items SELECT seq, CONCAT('item ', seq) "
                       "FROM shop.seq_1_to_500")
        wait_for(lambda: dump_thread_ciphers(source), what="the daemon's dump connection")
        w.dump_ciphers = dump_thread_ciphers(source)
        w.base = run_cli("base", "--source", url(source), "--archive", w.archive,
                         "--source-name", "db1", "--ssl-mode", "verify-identity",
                         "--ssl-ca", pki["ca"], *client_cert(pki), password=PASSWORD,
                         timeout=120)
        source.execute(*[f"INSERT INTO shop.orders (qty) VALUES ({i})" for i in range(50)],
                       "UPDATE shop.items SET name = 'renamed' WHERE id % 7 = 0")
        w.final = checksums(source)
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

@pytest.mark.server
def test_clear_text_login_of_the_user_is_refused_by_both_servers(world, pki):
    """What makes every success below a TLS connection with the client certificate."""
    import pymysql
    for server in (world.source, world.target):
        with pytest.raises(pymysql.err.OperationalError) as e:
            pymysql.connect(host="127.0.0.1", port=server.port, user=USER,
                            password=PASSWORD, ssl_disabled=True)
        assert e.value.args[0] == 1045


@pytest.mark.server
def test_stream_base_restore_all_over_tls(world):
    assert world.daemon_exit == 0, world.daemon_output
    assert world.dump_ciphers and all(world.dump_ciphers), world.dump_ciphers  # e.g. TLS_AES..
    assert world.base.returncode == 0, world.base.stderr
    assert world.base.stdout.startswith("base "), world.base.stdout
    assert world.restore.returncode == 0, world.restore.stderr + world.restore.stdout
    assert checksums(world.target) == world.final


# -- refusals: one line each --------------------------------------------------------------

def one_error_line(result, code, only=True):
    """The one error line (the only line on stderr, or with ``only=False`` the last one,
    after progress lines) of a command that exited ``code``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, result.stderr
    assert [line for line in lines if line.startswith("mysqlbackup: error:")] == lines[-1:]
    assert len(lines) == 1 or not only, result.stderr
    return lines[-1]


@pytest.mark.server
def test_ssl_mode_disabled_against_require_secure_transport(world, tmp_path):
    port = world.source.port
    hint = (f"mysqlbackup: error: access denied for {USER}@127.0.0.1:{port}: clear text "
            f"(--ssl-mode disabled) is refused by a server with require_secure_transport=ON "
            f"and for a user REQUIRE SSL/X509; else check the password")
    stream = run_cli("stream", "--source", url(world.source), "--server-id", "91", "--dir",
                     str(tmp_path / "d"), "--ssl-mode", "disabled", password=PASSWORD)
    assert one_error_line(stream, 3).startswith(hint)
    base = run_cli("base", "--source", url(world.source), "--archive", world.archive,
                   "--source-name", "db1", "--ssl-mode", "disabled", password=PASSWORD)
    assert one_error_line(base, 3).startswith(hint)


@pytest.mark.server
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
                   "--source-name", "db1", *wrong, password=PASSWORD)
    assert one_error_line(base, 3) == line


@pytest.mark.server
def test_verify_identity_refuses_a_certificate_for_another_host(world, pki):
    restore = run_cli("restore", "--archive", world.archive, "--source-name", "db1",
                      "--target", url(world.target), "--target-ssl-mode", "verify-identity",
                      "--target-ssl-ca", pki["ca"], *client_cert(pki, "--target-ssl"),
                      password=PASSWORD)
    port = world.target.port
    assert one_error_line(restore, 3, only=False) == (
        f"mysqlbackup: error: cannot connect to the target 127.0.0.1:{port}: TLS: the "
        f"certificate of 127.0.0.1:{port} is not valid for that host name "
        f"(--target-ssl-mode verify-identity): IP address mismatch, certificate is not "
        f"valid for '127.0.0.1'.")


def test_required_against_a_server_without_tls(primary):
    base = run_cli("base", "--source", primary.url, "--archive", "file:///nonexistent",
                   "--ssl-mode", "required")
    assert one_error_line(base, 3) == (f"mysqlbackup: error: TLS: 127.0.0.1:{primary.port} "
                                       f"offers no TLS, and --ssl-mode is required")
