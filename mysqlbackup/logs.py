"""Log output of the ``mysqlbackup`` command: text lines or JSON lines, URLs masked.

``--log-format text`` (default): ``TIME LEVEL LOGGER: MESSAGE``. ``--log-format json``:
one JSON object per line with ``time`` (ISO 8601, UTC), ``level``, ``logger``,
``event`` (the message) and the structured fields the code passes with
``extra={...}`` (``file``, ``position``, ``gtid``, ...), ready for Loki or
Elasticsearch. Both mask the credentials of every URL (``errors.mask_url``).
The records of Spark's Python side (py4j, pyspark: a gateway's connection errors) are
debug output, whatever level they were logged at: ``--log-level debug`` shows them.
"""

import copy
import json
import logging
import os
import sys
from datetime import datetime, timezone

from mysqlbackup.errors import mask_url

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# the attributes every LogRecord has: anything else came from extra={...}
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_state = {"format": "text"}
# Spark's Python side: its records (a gateway's connection reset, even at ERROR) are
# debug output of ours, whatever level they were logged at (never imported here)
SPARK_PACKAGES = ("py4j", "pyspark")


class MaskingFormatter(logging.Formatter):
    """Log lines never carry the user-info (credentials) of a URL."""

    def format(self, record):
        return mask_url(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, event and the extra fields."""

    def format(self, record):
        out = {"time": _iso_utc(record.created), "level": record.levelname.lower(),
               "logger": record.name, "event": mask_url(record.getMessage())}
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = _plain(value)
        if record.exc_info:
            out["exception"] = mask_url(self.formatException(record.exc_info))
        return json.dumps(out, default=lambda v: mask_url(str(v)))


def _iso_utc(created):
    moment = datetime.fromtimestamp(created, timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _plain(value):
    """A JSON-able field value; text masked (a URL may be in it)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return mask_url(str(value))


class _Stderr:
    """Whatever ``sys.stderr`` is at the time of the write (click's test runner swaps
    it, a progress bar redirects it above itself)."""

    def write(self, text):
        return sys.stderr.write(text)

    def flush(self):
        sys.stderr.flush()


def from_spark(record):
    """True for a record of py4j's or pyspark's own: of a logger named ``py4j...`` or
    ``pyspark...``, or logged from their code through the root logger (py4j's
    ``logging.exception("Exception while sending command.")``)."""
    if record.name.partition(".")[0] in SPARK_PACKAGES:
        return True
    return record.name == "root" and any(
        record.pathname.startswith(folder) for folder in _spark_folders())


def _spark_folders():
    """The folders (with a trailing separator) of the Spark packages imported so far:
    one not imported has logged nothing."""
    return [os.path.join(folder, "")
            for name in SPARK_PACKAGES if name in sys.modules
            for folder in getattr(sys.modules[name], "__path__", ())]


def _as_debug(record):
    """A copy of ``record`` at debug level (other handlers see the record as it was)."""
    demoted = copy.copy(record)
    demoted.levelno, demoted.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
    return demoted


class _Handler(logging.StreamHandler):
    """Our handler on the root logger (replaced, never doubled, on a new invocation).
    Spark's records (``from_spark``) go out at debug level, so only when ``verbose``
    (``--log-level debug``)."""

    def __init__(self, stream, verbose):
        super().__init__(stream)
        self.verbose = verbose

    def handle(self, record):
        """Emit ``record``, Spark's as debug records, and those only when verbose."""
        if from_spark(record):
            if not self.verbose:
                return False
            record = _as_debug(record)
        return super().handle(record)


def configure(level="info", fmt="text"):
    """Send log records of ``level`` and above to stderr as ``fmt`` (text or json);
    py4j's and pyspark's as debug records, shown at ``debug`` only (``from_spark``)."""
    handler = _Handler(_Stderr(), verbose=logging.getLevelName(level.upper()) <= logging.DEBUG)
    handler.setFormatter(JsonFormatter() if fmt == "json" else MaskingFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _Handler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    _state["format"] = fmt


def json_lines():
    """True when ``--log-format json`` is in force (errors and progress go as JSON too)."""
    return _state["format"] == "json"


def log_error(error):
    """The one line of an error the CLI exits on, as a JSON log record (``--log-format
    json``): the message, the exit code, and the file and offset (position) when the error
    has them."""
    fields = {"exit_code": error.exit_code, "error": type(error).__name__}
    for name in ("file", "offset", "position"):
        if getattr(error, name, None) is not None:
            fields[name] = getattr(error, name)
    logging.getLogger("mysqlbackup").error(mask_url(error), extra=fields)
