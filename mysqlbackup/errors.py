"""Exception tree and exit codes: every error the tool raises on purpose derives from
MysqlBackupError.

The CLI turns any MysqlBackupError into one clear line on stderr and a non-zero
exit code (``exit_code`` of the class); anything else is a bug and shows a traceback.
Every command exits with a code of one table, ``ExitCode`` (names) and ``EXIT_CODES``
(what each means, as data: ``exit_code_rows`` for a reference generator); each
exception class takes its ``exit_code`` from it, so one situation gets one code in
every command.

Reading an archive, three situations are told apart from an empty archive (an
existing empty directory or bucket: a listing of it succeeds and says it is empty):
``ArchiveNotFound`` (the URL is no archive: a missing directory, a file, a bucket the
store does not have), ``SourceNotFound`` (the source named is not in the archive) and
``StoreError`` (the store is unreachable or refuses a request). Readers never create
an archive; writers (stream, base, archive import) create a missing ``file://`` root.
"""

import enum
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


class ExitCode(enum.IntEnum):
    """The exit code of every command; ``EXIT_CODES`` says what each one means."""

    OK = 0
    FAILED = 1
    USAGE = 2
    SOURCE = 3
    CONNECTION_LOST = 4
    PROTOCOL = 5
    CORRUPT = 6
    RESYNC = 7
    LOCAL_STATE = 8
    NOT_AN_ARCHIVE = 9
    NO_SUCH_SOURCE = 10
    STORE = 11
    CONFLICT = 12


EXIT_CODES = {
    ExitCode.OK: "success; an empty archive too where a listing is all that was asked "
                 "(archive ls, retain)",
    ExitCode.FAILED: "problems found (verify, drill, inspect, status --check), or an "
                     "operation failed (the dump or load tool, an apply to the target)",
    ExitCode.USAGE: "bad usage: a bad option or value, a malformed URL or source name "
                    "(../x), a missing password or key, several sources and no "
                    "--source-name; an undo of what undo cannot reverse (DDL, "
                    "statement-based DML, a table with triggers...)",
    ExitCode.SOURCE: "the source server cannot be used: unreachable at the first start, "
                     "wrong password, no binary log",
    ExitCode.CONNECTION_LOST: "reserved: a replication connection lost after it was "
                              "established (the daemon retries it; no command exits with it)",
    ExitCode.PROTOCOL: "the server sent something the replication protocol does not allow",
    ExitCode.CORRUPT: "a damaged binlog file, event or archive object (bad magic, torn "
                      "event, CRC mismatch, an index that is not its object's)",
    ExitCode.RESYNC: "resync required: a gap in the binlogs (an INCIDENT event, a purged "
                     "binlog, a hole in the archive), or no base backup can start the "
                     "restore asked for",
    ExitCode.LOCAL_STATE: "local directory problem: a full, read-only or refusing file "
                          "system, a file too large, a file that is not part of the backup",
    ExitCode.NOT_AN_ARCHIVE: "--archive is not an archive: no such directory, a file, a "
                             "bucket that does not exist (an existing empty directory or "
                             "bucket is an empty archive)",
    ExitCode.NO_SUCH_SOURCE: "the source is not in the archive: --source-name names none "
                             "of its sources, or the archive is empty and the command "
                             "reads one source",
    ExitCode.STORE: "the archive store failed a request: unreachable (connection refused, "
                    "timed out) or refused (permissions, credentials)",
    ExitCode.CONFLICT: "undo: a row the undo would change is no longer as the named "
                       "transactions left it (a later write changed it); nothing was "
                       "changed on the target",
}


def exit_code_rows():
    """[(code, NAME, meaning)] of every exit code, in order: the table a reference
    (``mysqlbackup --help``, generated docs) renders."""
    return [(int(code), code.name, EXIT_CODES[code]) for code in ExitCode]


class MysqlBackupError(Exception):
    """Base of every error the tool raises on purpose."""

    exit_code = ExitCode.FAILED


class UsageError(MysqlBackupError):
    """Bad input from the user: a malformed URL, a missing password, a bad option."""

    exit_code = ExitCode.USAGE


class SourceError(MysqlBackupError):
    """The source server cannot be used: unreachable, wrong password, no binary log."""

    exit_code = ExitCode.SOURCE


class ConnectionLost(MysqlBackupError):
    """The replication connection dropped after it had been established; retried by the
    daemon, so no command exits with its code."""

    exit_code = ExitCode.CONNECTION_LOST


class ProtocolError(MysqlBackupError):
    """The server sent something the replication protocol does not allow."""

    exit_code = ExitCode.PROTOCOL


class CorruptBinlog(MysqlBackupError):
    """A binlog file or event is damaged: bad magic, torn event, CRC mismatch, bad lengths."""

    exit_code = ExitCode.CORRUPT

    def __init__(self, message, file=None, offset=None):
        where = ""
        if file is not None:
            where = f"{file}" + (f" at offset {offset}" if offset is not None else "") + ": "
        super().__init__(where + message)
        self.detail = message   # what is wrong, without the file and offset
        self.file = file
        self.offset = offset


class TornEvent(CorruptBinlog):
    """The bytes end inside an event: damage in a sealed file, the place a file still
    being written has reached in the newest one (readers of a live archive stop there)."""


class NativeRefused(UsageError):
    """``--apply native`` cannot restore what was asked: ``reason`` says why, the message
    adds what to use instead (``suffix``)."""

    def __init__(self, reason, suffix=""):
        super().__init__(reason + suffix)
        self.reason = reason


class ResyncRequired(MysqlBackupError):
    """A gap in the binlog stream: the backup cannot continue without a new full backup."""

    exit_code = ExitCode.RESYNC

    def __init__(self, reason, file=None, position=None):
        where = f" at {file}:{position}" if file is not None else ""
        super().__init__(f"resync required: {reason}{where}")
        self.reason = reason
        self.file = file
        self.position = position


class LocalStateError(MysqlBackupError):
    """The local backup directory is inconsistent or belongs to another source."""

    exit_code = ExitCode.LOCAL_STATE


class ArchiveNotFound(UsageError):
    """The archive URL is not an archive: no such directory, a file, a bucket the store
    does not have. An existing empty directory or bucket is an empty archive."""

    exit_code = ExitCode.NOT_AN_ARCHIVE


class SourceNotFound(UsageError):
    """The source asked for is not in the archive (or the archive is empty and the
    command reads one source)."""

    exit_code = ExitCode.NO_SUCH_SOURCE


class StoreError(MysqlBackupError):
    """A request to the archive store failed: unreachable, timed out, refused."""

    exit_code = ExitCode.STORE


class ConflictError(MysqlBackupError):
    """The target's rows are not as a change expects them (undo: a later write changed a
    row the undo would put back); nothing was changed."""

    exit_code = ExitCode.CONFLICT


class ArchiveHoles(ResyncRequired):
    """The archive lacks what a replay must read: ``problems``, each naming an object
    (a missing or unverified file, a break in the chain, a failover switch that does not
    follow)."""

    def __init__(self, problems):
        super().__init__("the archive has holes: " + "; ".join(problems)
                         + " (--allow-gaps replays across them)")
        self.problems = list(problems)
