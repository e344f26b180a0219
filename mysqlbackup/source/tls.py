"""TLS settings of a server connection, and what they mean to each client (pure).

The modes are the MySQL client's ``--ssl-mode`` names and meanings:

- ``disabled``: clear text.
- ``preferred`` (default): TLS when the server offers it, clear text otherwise.
- ``required``: TLS or fail; the server's certificate is not checked.
- ``verify-ca``: TLS, and the server's certificate chain must lead to ``--ssl-ca``.
- ``verify-identity``: ``verify-ca``, and the certificate must name the host connected to.

A client certificate (``--ssl-cert``/``--ssl-key``) is sent in every mode but
``disabled`` (a user ``REQUIRE X509`` needs it).

Two clients take these settings: PyMySQL (the replication, control and target
connections: ``context_args`` / ``pymysql_mode``) and the server's own tools
(``mariadb-dump``, ``mariadb-backup``, the ``mariadb`` client that loads a dump:
``client_options``, lines of their options file). MariaDB 10.11's tools have TLS on
by default and fall back to clear text when the server offers none (``preferred``);
``ssl-ca`` makes them check the chain, ``ssl-verify-server-cert`` the chain and
the host name; they have no way to refuse clear text without a check, so for
``required`` the tool runs only after a PyMySQL connection in that mode succeeded.
"""

from dataclasses import dataclass, field

from mysqlbackup.errors import UsageError

MODES = ("disabled", "preferred", "required", "verify-ca", "verify-identity")
DEFAULT_MODE = "preferred"


@dataclass(frozen=True)
class TlsSettings:
    """How to secure one server connection; ``option`` is the command-line prefix the
    messages name (``--ssl`` for a source, ``--target-ssl`` for a target)."""

    mode: str = DEFAULT_MODE
    ca: str = None       # PEM file of the CA(s) the server's certificate must chain to
    cert: str = None     # PEM client certificate (REQUIRE X509)
    key: str = None      # its private key (PEM; may be inside ``cert``)
    option: str = field(default="--ssl", compare=False)

    def __post_init__(self):
        problem = settings_problem(self)
        if problem:
            raise UsageError(problem)

    @property
    def enabled(self):
        """TLS may be used (every mode but disabled)."""
        return self.mode != "disabled"

    @property
    def required(self):
        """Clear text is refused."""
        return self.mode in ("required", "verify-ca", "verify-identity")

    @property
    def verify_cert(self):
        """The server's certificate chain is checked against ``ca``."""
        return self.mode in ("verify-ca", "verify-identity")

    @property
    def verify_identity(self):
        """The server's certificate must name the host connected to."""
        return self.mode == "verify-identity"


def settings_problem(tls):
    """What is wrong with a combination of settings, or None."""
    o = tls.option
    if tls.mode not in MODES:
        return f"{o}-mode must be one of {', '.join(MODES)}, not {tls.mode!r}"
    if tls.verify_cert and not tls.ca:
        return f"{o}-mode {tls.mode} needs {o}-ca (the CA the server's certificate must " \
               f"chain to)"
    if tls.key and not tls.cert:
        return f"{o}-key needs {o}-cert"
    if tls.mode == "disabled" and (tls.ca or tls.cert):
        return f"{o}-mode disabled uses no certificate: drop {o}-ca/{o}-cert/{o}-key"
    return None


def pymysql_mode(tls):
    """How PyMySQL 1.2 is told: 'disabled' (``ssl_disabled=True``), 'preferred' (its
    default: TLS when the server offers it; our context replaces its own, for the
    client certificate) or 'required' (``ssl=`` our context: TLS or error 2026)."""
    if not tls.enabled:
        return "disabled"
    return "required" if tls.required else "preferred"


def context_args(tls):
    """What the ``ssl.SSLContext`` of a PyMySQL connection holds: {'verify': chain
    checked, 'check_hostname', 'cafile', 'certfile', 'keyfile'}."""
    return {"verify": tls.verify_cert, "check_hostname": tls.verify_identity,
            "cafile": tls.ca if tls.verify_cert else None,
            "certfile": tls.cert, "keyfile": tls.key}


def certificate_options(tls):
    """The ``ssl-ca``, ``ssl-cert``, ``ssl-key`` entries that MariaDB's and MySQL's clients
    both take (the CA only where the server's certificate is checked)."""
    entries = []
    if tls.verify_cert:
        entries.append(("ssl-ca", tls.ca))
    if tls.cert:
        entries.append(("ssl-cert", tls.cert))
    if tls.key:
        entries.append(("ssl-key", tls.key))
    return entries


def client_options(tls):
    """Options-file entries (name, value or None) for MariaDB's own clients (mariadb,
    mariadb-dump, mariadb-backup: MariaDB 10.11 names)."""
    if not tls.enabled:
        return [("skip-ssl", None)]  # nothing after it: an ssl-* option turns TLS back on
    entries = [("ssl", None)] + certificate_options(tls)
    if tls.verify_identity:
        entries.append(("ssl-verify-server-cert", None))
    return entries


def certificate_problem(address, verify_message, tls):
    """One line for a server certificate the client refused (``verify_message``: what
    OpenSSL found wrong with it)."""
    o = tls.option
    if tls.verify_identity and "mismatch" in verify_message:
        return (f"TLS: the certificate of {address} is not valid for that host name "
                f"({o}-mode verify-identity): {verify_message}")
    return (f"TLS: the certificate of {address} was refused ({o}-mode {tls.mode}, "
            f"{o}-ca {tls.ca}): {verify_message}")


def denied_hint(tls, password_from):
    """What to check after 'access denied', given how the connection was made
    (``password_from``: where the password came from, e.g. MYSQLBACKUP_PASSWORD)."""
    check = f"check the password ({password_from})"
    if not tls.enabled:
        return (f"clear text ({tls.option}-mode disabled) is refused by a server with "
                f"require_secure_transport=ON and for a user REQUIRE SSL/X509; else {check}")
    if not tls.cert:
        return f"{check}; a user REQUIRE X509 also needs {tls.option}-cert and {tls.option}-key"
    return f"{check} and the client certificate"
