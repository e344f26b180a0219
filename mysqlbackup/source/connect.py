"""PyMySQL connections to a server with the TLS settings of its ``SourceSpec`` (I/O:
the context reads the certificate files), and the one line a TLS failure becomes.

Every PyMySQL connection of the tool (replication, base control, replay and restore
target) is made here. PyMySQL 1.2.4 (pinned) does the TLS handshake inside
``connect``: ``ssl_disabled=True`` never starts TLS; without ``ssl`` options it is in
"preferred" mode (TLS when the server offers it) with a context of its own, which
we set up ourselves (``Connection.ssl``, ``_ssl_required``, ``ctx``: our context sends
the client certificate, and PyMySQL's would load the CA store for nothing); ``ssl=`` a context
makes TLS required (error 2026 when the server offers none). A certificate the
context refuses comes back as error 2003 with the ``ssl.SSLCertVerificationError``
as its ``__context__``.
"""

import ssl

import pymysql

from mysqlbackup.errors import SourceError
from mysqlbackup.source.tls import (certificate_problem, context_args, denied_hint,
                                    pymysql_mode)

ACCESS_DENIED = 1045
SSL_CONNECTION_ERROR = 2026  # PyMySQL: TLS required, the server offers none


def ssl_context(tls):
    """The ``ssl.SSLContext`` for ``tls`` (UsageError-free: a missing file is a
    SourceError naming it)."""
    args = context_args(tls)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = args["check_hostname"]
    ctx.verify_mode = ssl.CERT_REQUIRED if args["verify"] else ssl.CERT_NONE
    try:
        if args["cafile"]:
            ctx.load_verify_locations(cafile=args["cafile"])
        if args["certfile"]:
            ctx.load_cert_chain(args["certfile"], keyfile=args["keyfile"])
    except (OSError, ssl.SSLError) as e:
        raise SourceError(f"TLS: cannot load {tls.option}-ca/{tls.option}-cert/"
                          f"{tls.option}-key: {getattr(e, 'strerror', None) or e}") from None
    return ctx


def new_connection(spec, **kwargs):
    """A PyMySQL Connection to ``spec`` (not connected yet: call ``connect()``), with
    its TLS settings; ``kwargs`` go to PyMySQL (timeouts, autocommit, flags)."""
    mode = pymysql_mode(spec.tls)
    # "preferred" is built as "disabled" and then switched on: PyMySQL's own preferred
    # mode makes a default context that loads the system's CA certificates (~40 ms a
    # connection) only for us to replace it
    tls_args = {"ssl_disabled": True} if mode != "required" else {"ssl": ssl_context(spec.tls)}
    conn = pymysql.connections.Connection(
        host=spec.host, port=spec.port, user=spec.user, password=spec.password,
        defer_connect=True, **tls_args, **kwargs)
    if mode == "preferred":  # PyMySQL's preferred mode (TLS when offered), our context
        conn.ssl, conn._ssl_required, conn.ctx = True, False, ssl_context(spec.tls)
    return conn


def connect(spec, **kwargs):
    """A connected PyMySQL Connection to ``spec``; PyMySQL's errors as they come."""
    conn = new_connection(spec, **kwargs)
    conn.connect()
    return conn


def tls_failure(e, spec):
    """The SourceError a failed connect means when TLS is why, else None."""
    code = e.args[0] if e.args else 0
    if code == SSL_CONNECTION_ERROR:
        return SourceError(f"TLS: {spec.address} offers no TLS, and {spec.tls.option}-mode "
                           f"is {spec.tls.mode}")
    cause = e.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        return SourceError(certificate_problem(spec.address, cause.verify_message, spec.tls))
    if isinstance(cause, ssl.SSLError):
        return SourceError(f"TLS: the handshake with {spec.address} failed: "
                           f"{cause.reason or cause}")
    return None


def denied(spec, password_from="MYSQLBACKUP_PASSWORD or --password-file"):
    """The SourceError for a refused login (error 1045), with what to check."""
    return SourceError(f"access denied for {spec.user}@{spec.address}: "
                       f"{denied_hint(spec.tls, password_from)}")
