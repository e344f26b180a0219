"""``mysqlbackup serve``: the archive served as its source's primary to a real replica:
a MariaDB source's as a MariaDB primary, a MySQL source's as a MySQL 8.4/9.x primary
(``CHANGE REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1``; caching_sha2_password,
fast, in clear over TLS or through the RSA key exchange, or mysql_native_password).

Programmatic API (what ``restore --apply native`` calls)::

    from mysqlbackup.archive.stop import StopGtid
    from replay.planning.options import build_selection
    from replay.serve.server import ServeOptions, start_server

    options = ServeOptions(archive_url, source_name="db1", listen=("127.0.0.1", 0),
                           user="mysqlbackup_serve", password=secret,
                           selection=build_selection(stop=StopGtid((0, 1, 42))),
                           identity=None, storage_options={})
    with start_server(options) as handle:        # ServeHandle
        replica: CHANGE MASTER TO MASTER_HOST=handle.host, MASTER_PORT=handle.port,
                 MASTER_USER=..., MASTER_PASSWORD=..., MASTER_USE_GTID=slave_pos;
                 START SLAVE
        end = handle.wait_end(timeout)           # EndInfo(file, pos, last_gtid, reason)
        ... wait until the replica's gtid_slave_pos is end.last_gtid, then STOP SLAVE ...
    # leaving the block = handle.stop(): listener and connections closed, threads joined

* ``start_server`` checks the archive first (its source, its files, the keys that
  open them, a MariaDB source or a MySQL one with GTIDs) and raises ``UsageError`` /
  ``MysqlBackupError`` with one clear line; ``options.selection`` is a replay
  ``Selection``: its stop point (``stop``, one ``mysqlbackup.archive.stop.Stop``)
  and ``exclude`` apply (its start fields are ignored: the replica
  asks by GTID or file:position; its database/table filters and rewrites are refused:
  serve sends whole transactions).
* Once a dump has sent the last transaction before the stop point (or the
  archive's end) the connection stays open with heartbeats, as a primary with
  nothing more to send: the replica stays connected and idle. Without a stop point
  met, the server looks for newly archived transactions every
  ``options.poll_interval`` seconds (None: never) and sends them.
* TLS: with ``options.tls_cert`` (and ``tls_key``) the handshake offers CLIENT_SSL;
  a replica's SSL request (MASTER_SSL=1) is answered with a TLS handshake
  (``ssl.PROTOCOL_TLS_SERVER``, TLS 1.2 or later) and the login goes on over it;
  ``options.require_tls``: a clear-text login is denied with 1045, as for a user
  REQUIRE SSL. ``handle.dump_tls``: the TLS version of each dump's connection.
* ``handle.wait_end(timeout)``: the ``EndInfo`` of the newest dump that reached its
  end, or None; ``handle.errors``: the (code, message) of each dump refused (ER 1236
  when the archive lacks what the replica asks for).

* Hostile clients are bounded (``limits``): a whole handshake within 10 s, packets of
  64 KiB before login and 1 MiB after, 32 connections logging in (a new one ends the
  oldest), ``options.max_connections`` logged in (more: 1040), a growing delay per
  address after failed logins; each malformed packet gets mariadbd's error.
  ``handle.stats``: what was refused; ``options.metrics_address``: the same as
  Prometheus metrics.

Modules: ``packets`` (pure: handshake, OK/ERR/EOF, result sets, artificial
events), ``mysql`` (pure: MySQL's handshake, caching_sha2_password, RSA,
COM_BINLOG_DUMP_GTID's GTID set, HEARTBEAT_V2, ER 1236's texts), ``queries`` (pure:
the replica's set-up queries and their answers, either flavor), ``catalog`` (the
source's tables, for the clients that ask), ``feed`` (archive -> events of one dump:
start, skip, stop, exclusions), ``mysqlfeed`` (MySQL's walk: where a GTID dump
starts, the heartbeat after skipped transactions), ``limits`` (pure: throttle, log
limiter, LIKE, the bounds), ``archive`` (the served archive: units, chunks, the
primary's facts, its end now), ``registry`` (the connections' bookkeeping: dumps,
counts, throttle, log limiter, caching_sha2's cache), ``listener`` (the accept loop,
the caps of handshakes and connections), ``auth`` (the login's settings: TLS context,
RSA key), ``connection`` (one client: handshake, commands, dump), ``server``
(``start_server``, ``ServeHandle``: the parts composed), ``metrics`` (Prometheus),
``cli`` (the click command).
"""
