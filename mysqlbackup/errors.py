"""Exception tree: every error the tool raises on purpose derives from MysqlBackupError.

The CLI turns any MysqlBackupError into one clear line on stderr and a non-zero
exit code (``exit_code`` of the class); anything else is a bug and shows a traceback.
"""

import re

# the user-info part ("user:secret@") of any URL in a text. Linear in the text's length
# (it may hold a client's input, e.g. a user name): a scheme starts only where a run of
# scheme characters starts (the lookbehind), so no run is scanned from each of its
# letters, and a user-info stops at the next "/" (every "://" has one).
_USERINFO = re.compile(r"(?<![A-Za-z0-9+.-])(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"
                       r"(?P<info>[^/\s@'\"]*)@")
_SERVER_SCHEMES = ("mysql://", "mariadb://")


def mask_url(text):
    """``text`` with the credentials in every URL replaced by ``***``.

    Used on every URL (source, archive, target) and error text we print, log or
    store. The user-info of a storage URL goes whole (it may be a key or a token);
    of a server URL (mysql://USER@HOST) only a password, the user name stays."""
    if text is None:
        return None
    return _USERINFO.sub(_mask_one, str(text))


def _mask_one(m):
    scheme, info = m["scheme"], m["info"]
    if scheme.lower() in _SERVER_SCHEMES:
        user, colon, _ = info.partition(":")
        return f"{scheme}{user}{':***' if colon else ''}@"
    return f"{scheme}***@"


class MysqlBackupError(Exception):
    """Base of every error the tool raises on purpose."""

    exit_code = 1


class UsageError(MysqlBackupError):
    """Bad input from the user: a malformed URL, a missing password, a bad option."""

    exit_code = 2


class SourceError(MysqlBackupError):
    """The source server cannot be used: unreachable, wrong password, no binary log."""

    exit_code = 3


class ConnectionLost(MysqlBackupError):
    """The replication connection dropped after it had been established; retried."""

    exit_code = 4


class ProtocolError(MysqlBackupError):
    """The server sent something the replication protocol does not allow."""

    exit_code = 5


class CorruptBinlog(MysqlBackupError):
    """A binlog file or event is damaged: bad magic, torn event, CRC mismatch, bad lengths."""

    exit_code = 6

    def __init__(self, message, file=None, offset=None):
        where = ""
        if file is not None:
            where = f"{file}" + (f" at offset {offset}" if offset is not None else "") + ": "
        super().__init__(where + message)
        self.file = file
        self.offset = offset


class ResyncRequired(MysqlBackupError):
    """A gap in the binlog stream: the backup cannot continue without a new full backup."""

    exit_code = 7

    def __init__(self, reason, file=None, position=None):
        where = f" at {file}:{position}" if file is not None else ""
        super().__init__(f"resync required: {reason}{where}")
        self.reason = reason
        self.file = file
        self.position = position


class LocalStateError(MysqlBackupError):
    """The local backup directory is inconsistent or belongs to another source."""

    exit_code = 8
