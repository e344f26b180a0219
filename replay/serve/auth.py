"""What every connection of ``mysqlbackup serve`` is told at start, read-only.

``Settings``: the one user's login (its password, mysql_native_password's stored
hash, the TLS context offered and its certificate's fingerprint, a MySQL archive's
RSA key of caching_sha2_password's exchange, whether clear text is refused) and the
dump's (``max_connections``, ``poll_interval``, the selection). ``tls_context``
loads ``--ssl-cert``/``--ssl-key`` or makes a self-signed certificate
(``certs.self_signed``); ``rsa_key`` reads ``--rsa-key`` or generates one, as mysqld
does when it has none. UsageError when either cannot be loaded.
"""

import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass

from mysqlbackup.errors import UsageError
from replay.planning.selection import Selection
from replay.serve.protocol import certs
from replay.serve.protocol import packets as pk


@dataclass(frozen=True)
class Settings:
    """The login a connection checks and the settings its dump follows."""

    user: str
    password: str
    stored_hash: bytes          # SHA1(SHA1(password)): mysql_native_password's
    tls_context: ssl.SSLContext  # offered to clients (CLIENT_SSL)
    tls_fingerprint: str        # SHA-256 of its certificate (MariaDB's proof in the OK)
    rsa_key: object             # MySQL: caching_sha2_password's RSA key (None: MariaDB)
    require_tls: bool           # a clear-text login is denied (1045)
    max_connections: int        # logged in at once (more: 1040)
    poll_interval: float        # after the archive's end, look for more (None: never)
    selection: Selection        # the stop point and exclusions a dump applies


def settings_of(options, tls, flavor):
    """The ``Settings`` of ``options`` (a ServeOptions) with ``tls`` (``tls_context``'s
    pair) for an archive of ``flavor``: a MySQL one's RSA key loaded or made now."""
    context, fingerprint = tls
    return Settings(options.user, options.password, pk.password_hash(options.password),
                    context, fingerprint,
                    rsa_key(options.rsa_key) if flavor == "mysql" else None,
                    options.require_tls, options.max_connections, options.poll_interval,
                    options.selection)


def rsa_key(path):
    """The RSA private key of caching_sha2_password's exchange: read from ``path`` (PEM),
    or generated now (as mysqld does when it has none); UsageError when unusable."""
    from replay.serve.protocol import mysql as my
    if not path:
        return my.new_rsa_key()
    try:
        with open(path, "rb") as f:
            return my.load_rsa_key(f.read())
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"cannot load the RSA key {path}: {getattr(e, 'strerror', None) or e}"
                         ) from None


def tls_context(cert, key):
    """(server-side SSLContext, SHA-256 fingerprint of its certificate) of ``cert``/``key``,
    or of a self-signed certificate made now when no ``cert`` is given
    (``certs.self_signed``); UsageError when they cannot be loaded."""
    if not cert:
        if key:
            raise UsageError("--ssl-key needs --ssl-cert")
        pem, key_pem = certs.self_signed()
        return _context_of_pem(pem, key_pem), certs.fingerprint(pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        with open(cert, "rb") as f:
            found = certs.fingerprint(f.read())
    except (OSError, ssl.SSLError, ValueError) as e:
        raise UsageError(f"cannot load the TLS certificate {cert}"
                         f"{f' and key {key}' if key else ''}: "
                         f"{getattr(e, 'strerror', None) or e}") from None
    return context, found


def _context_of_pem(pem, key_pem):
    """An SSLContext of a certificate and key held in memory (the ssl module loads only
    files: they pass through a private 0600 file, removed at once)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    folder = tempfile.mkdtemp(prefix="mysqlbackup-serve-tls-")
    try:
        path = os.path.join(folder, "cert.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(pem + key_pem)
        context.load_cert_chain(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context
