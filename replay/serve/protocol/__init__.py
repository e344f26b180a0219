"""The wire side of ``mysqlbackup serve``, pure: no socket, no archive. ``packets``
(MariaDB's handshake, OK/ERR/EOF, result sets, the fake events), ``mysql`` (mysqld's
handshake and caching_sha2_password), ``queries`` (a replica's or binlog client's
queries and their answers), ``limits`` (the login throttle, the log limiter, the
bounds), ``certs`` (the self-signed certificate and the proof a MariaDB replica checks)."""
