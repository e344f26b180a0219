"""The ``mysqlbackup serve`` command (click); registered through the
``mysqlbackup.commands`` entry point, as ``replay`` is."""

import signal
import threading

import click

from mysqlbackup.archive.names import check_source_name
from mysqlbackup.cli.options import (archive_options, deprecated_alias, example, handle_errors,
                                     identity_option, source_name_option, stop_options)
from mysqlbackup.config import SERVE_PASSWORD_ENV as PASSWORD_ENV
from mysqlbackup.errors import UsageError, mask_url
from replay.serve.protocol.limits import HANDSHAKE_TIMEOUT, MAX_CONNECTIONS, MAX_HANDSHAKES

A_FILE = click.Path(dir_okay=False)


def parse_listen(text):
    """(host, port) of ``HOST:PORT`` ('[::1]:3307' for IPv6); UsageError otherwise."""
    host, sep, port = (text or "").rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageError(f"bad --listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:3307")
    return host, int(port)


@click.command(epilog=example(
    "mysqlbackup serve --archive s3://backups/mysql --source-name db1 --listen 0.0.0.0:3307 "
    "--replica-password-file /etc/mysqlbackup/serve.password --ssl-cert /etc/mysqlbackup/"
    "serve.pem --ssl-key /etc/mysqlbackup/serve.key --require-secure-transport"))
@archive_options
@source_name_option("one")
@click.option("--listen", default="127.0.0.1:3307", show_default=True, metavar="HOST:PORT",
              help="Address to accept replicas on (port 0: any free port, printed).")
@click.option("--user", default="mysqlbackup_serve", show_default=True,
              help="The one user replicas log in as (mysql_native_password; for a MySQL "
                   "archive caching_sha2_password too); its password "
                   f"comes from ${PASSWORD_ENV} or --replica-password-file.")
@click.option("--replica-password-file", type=A_FILE, metavar="FILE",
              help="File whose first line is the password of --user, the replicas' login "
                   f"(else ${PASSWORD_ENV}).")
@stop_options(helps={
    "--stop-datetime": "Serve no transaction committed at or after it (UTC unless it names "
                       "a zone); after the last one before it, only heartbeats.",
    "--stop-before-gtid": "Serve up to the transaction before this one.",
    "--stop-position": "Serve no transaction ending past it."})
@click.option("--exclude-gtids", metavar="GTID[,GTID...]", help="Send these transactions "
              "empty (their GTID and commit only: the replica's GTID position stays "
              "gap-free, nothing of them is applied).")
@click.option("--poll-interval", type=click.FloatRange(0), default=2.0, show_default=True,
              metavar="SECONDS", help="Once a replica has all the archive holds (and no stop "
              "point was met), look for newly archived transactions this often and send "
              "them (0: never).")
@click.option("--ssl-cert", type=A_FILE, metavar="FILE",
              help="PEM certificate (chain) of this server, as mysqld's --ssl-cert (default: "
                   "one made at start): TLS is offered to replicas (CHANGE MASTER TO "
                   "MASTER_SSL=1, MASTER_SSL_CA=...). "
                   "Replicas' certificates are not asked for (no --ssl-ca).")
@click.option("--ssl-key", type=A_FILE, metavar="FILE",
              help="Its private key (PEM), unless it is in --ssl-cert.")
@click.option("--require-secure-transport", is_flag=True, help="As mysqld's: deny a replica "
              "that does not ask for TLS (error 1045, as for a user REQUIRE SSL). Needs "
              "--ssl-cert.")
@click.option("--max-connections", type=click.IntRange(1), default=MAX_CONNECTIONS,
              show_default=True, help="Replicas logged in at once; one more is refused with "
              "error 1040 (Too many connections). Besides these, at most "
              f"{MAX_HANDSHAKES} connections may be logging in (each within "
              f"{HANDSHAKE_TIMEOUT:g} s); a new one ends the oldest.")
@click.option("--metrics-address", metavar="HOST:PORT", help="Serve Prometheus metrics at "
              "http://HOST:PORT/metrics: connections, dumps, refused logins and what the "
              "bounds refused (a bounded HTTP server, as the daemon's).")
@click.option("--rsa-key", type=A_FILE, metavar="FILE", help="MySQL archives: the PEM RSA "
              "private key of caching_sha2_password's exchange with a replica that logs in "
              "without TLS (GET_SOURCE_PUBLIC_KEY=1), as mysqld's caching_sha2_password_"
              "private_key_path (default: a new key made at start).")
@identity_option
@deprecated_alias("--password-file", "--replica-password-file", type=A_FILE)
@deprecated_alias("--tls-cert", "--ssl-cert", type=A_FILE)
@deprecated_alias("--tls-key", "--ssl-key", type=A_FILE)
@deprecated_alias("--require-tls", "--require-secure-transport", is_flag=True)
@handle_errors
def serve(archive_url, archive_option, source_name, listen, user, replica_password_file,
          stop, exclude_gtids, poll_interval,
          ssl_cert, ssl_key, require_secure_transport, max_connections, metrics_address,
          rsa_key, identity):
    """Serve the archive's binlogs to replicas as their primary would.

    The archive of a MariaDB source is served as a MariaDB primary, a MySQL source's
    as a MySQL 8.4/9.x primary (caching_sha2_password or mysql_native_password;
    CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1, or a SOURCE_LOG_FILE/POS).
    A MariaDB replica (CHANGE MASTER TO MASTER_HOST, MASTER_PORT, MASTER_USER,
    MASTER_PASSWORD, MASTER_USE_GTID=slave_pos or a MASTER_LOG_FILE/POS) gets only
    whole transactions, read from the archive's sealed and newest objects
    (compressed or encrypted alike), up to the stop point; then the connection
    stays open with heartbeats. A position or GTID state the archive lacks gets the
    server's error 1236. TLS is offered as a MariaDB 11.4+ or MySQL server offers it:
    with a certificate made at start (a stock MariaDB 11.8 replica verifies it by the
    password), or --ssl-cert's; --require-secure-transport refuses clear text (mysqld's
    names; the old --tls-cert, --tls-key, --require-tls and --password-file still work,
    with a warning). Runs until SIGTERM or SIGINT.

    Binlog clients other than replicas read from it as from the primary:
    mariadb-binlog and mysqlbinlog --read-from-remote-server (--raw gives the archived
    files; without --stop-never the dump ends at the archive's end),
    python-mysql-replication, zongji; their queries (binlog_checksum,
    binlog_row_metadata, SHOW MASTER STATUS / SHOW BINARY LOG STATUS, SHOW BINARY LOGS,
    INFORMATION_SCHEMA.COLUMNS' column names from the archive's TABLE_MAPs or its
    newest dump base) are answered from the archive. See the guide's "A CDC consumer lost its primary's
    binlogs".

    Hostile clients are bounded: a whole handshake within 10 s, packets of at most
    64 KiB before login and 1 MiB after, failed logins slowed down per address
    (a growing delay, up to 8 s, after 3), malformed packets answered with the
    server's error (1043 Bad handshake, 1153, 1156, ...), never a traceback.
    """
    from mysqlbackup.archive.options import parse_options
    from mysqlbackup.source.spec import read_password
    from replay.planning.options import build_selection
    from replay.serve.server import ServeOptions, start_server
    if not archive_url:
        raise UsageError("--archive is required")
    if source_name:
        check_source_name(source_name)  # before the store is asked
    if require_secure_transport and not ssl_cert:
        raise UsageError("--require-secure-transport needs --ssl-cert (and --ssl-key)")
    password = read_password(replica_password_file, (PASSWORD_ENV,))
    if not password:
        raise UsageError(f"no password for {user}: set ${PASSWORD_ENV} or "
                         "--replica-password-file")
    selection = build_selection(stop=stop, exclude_gtids=exclude_gtids)
    options = ServeOptions(archive_url, source_name, parse_listen(listen), user, password,
                           selection, identity, storage_options=parse_options(archive_option),
                           poll_interval=poll_interval or None, tls_cert=ssl_cert,
                           tls_key=ssl_key, require_tls=require_secure_transport,
                           max_connections=max_connections, metrics_address=metrics_address,
                           rsa_key=rsa_key)
    signalled = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: signalled.set())
    with start_server(options) as handle:
        tls = ", TLS required" if require_secure_transport else ", TLS" if ssl_cert else ""
        click.echo(f"serving {handle.source} from {mask_url(archive_url)} on "
                   f"{handle.host}:{handle.port} (user {user}{tls})", err=True)
        while not signalled.wait(1.0):
            pass
    click.echo("serve: stopped", err=True)
