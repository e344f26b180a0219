"""The source (or target) server's address and credentials.

``mysql://USER@HOST:PORT``; the password never comes from the command line: it
is read from an environment variable or from a file, so it shows neither in
``ps`` nor in logs (``SourceSpec`` leaves it out of its repr).
"""

import os
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from mysqlbackup.errors import UsageError, mask_url
from mysqlbackup.source.tls import TlsSettings

PASSWORD_ENV = "MYSQLBACKUP_PASSWORD"


@dataclass(frozen=True)
class SourceSpec:
    """Where to connect, as whom, and how securely; the password is hidden from repr()."""

    host: str
    port: int
    user: str
    password: str = field(default="", repr=False)
    tls: TlsSettings = TlsSettings()

    @property
    def address(self):
        return f"{self.host}:{self.port}"


def parse_source_url(url):
    """Parse ``mysql://USER@HOST[:PORT]`` (a source's or a target's) into (user, host,
    port); refuse a password in it. The errors name the URL, never the option: the same
    parser serves --source, --target and --replica-source."""
    parts = urlsplit(url)
    if parts.scheme not in ("mysql", "mariadb") or not parts.hostname:
        raise UsageError(f"bad server URL {mask_url(url)!r}: expected mysql://USER@HOST:PORT")
    if parts.password is not None:
        raise UsageError("do not put the password in the URL: use the MYSQLBACKUP_PASSWORD "
                         "environment variable or --password-file")
    if not parts.username:
        raise UsageError(f"bad server URL {mask_url(url)!r}: the user is missing "
                         f"(mysql://USER@HOST:PORT)")
    try:
        port = 3306 if parts.port is None else parts.port
    except ValueError:
        port = None
    if not port:
        raise UsageError(f"bad port in server URL {mask_url(url)!r}: a number from 1 to "
                         "65535 (default 3306)")
    return unquote(parts.username), parts.hostname, port


def read_password(password_file=None, env_names=(PASSWORD_ENV,), environ=None):
    """The password from ``password_file`` (first line) or the first set env variable."""
    environ = os.environ if environ is None else environ
    if password_file:
        try:
            with open(password_file, encoding="utf-8") as f:
                return f.readline().rstrip("\r\n")
        except OSError as e:
            raise UsageError(f"cannot read password file {password_file}: {e.strerror}") from None
    for name in env_names:
        if name in environ:
            return environ[name]
    return ""


def source_from_options(url, password_file=None, env_names=(PASSWORD_ENV,), tls=None):
    """Build a SourceSpec from the CLI's URL, password and TLS options."""
    user, host, port = parse_source_url(url)
    return SourceSpec(host, port, user, read_password(password_file, env_names),
                      tls or TlsSettings())
