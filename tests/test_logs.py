"""``--log-format json``: every stderr line of a real daemon (and of a failing command) is
one JSON object with time, level, logger, event and the fields the code logs (file,
position, gtid); URLs are masked as in the text format."""

import json
import logging
from datetime import datetime, timedelta, timezone

import pytest

from mysqlbackup import config, logs, speedups
from mysqlbackup.logs import TEXT_FORMAT, JsonFormatter, MaskingFormatter
from tests.helpers import Daemon, caught_up, run_cli, wait_for


def _record(message, *args, **extra):
    record = logging.LogRecord("mysqlbackup.test", logging.WARNING, __file__, 1, message,
                               args, None)
    record.__dict__.update(extra)
    return record


def test_json_formatter_fields_and_masking():
    record = _record("upload to %s failed", "s3://AKIA:topsecret@bucket/x", file="b.000002",
                     position=4711, url="s3://AKIA:topsecret@bucket/x", retry_in=1.5)
    line = JsonFormatter().format(record)
    assert "topsecret" not in line and "AKIA" not in line
    data = json.loads(line)
    assert data["event"] == "upload to s3://***@bucket/x failed"
    assert (data["level"], data["logger"]) == ("warning", "mysqlbackup.test")
    assert (data["file"], data["position"], data["retry_in"]) == ("b.000002", 4711, 1.5)
    assert data["url"] == "s3://***@bucket/x"
    moment = datetime.fromisoformat(data["time"].replace("Z", "+00:00"))
    assert data["time"].endswith("Z") and moment.utcoffset() == timedelta(0)
    assert abs(moment - datetime.fromtimestamp(record.created, timezone.utc)) < timedelta(
        milliseconds=1)
    text = MaskingFormatter(TEXT_FORMAT).format(_record("to %s", "mysql://u:pw@h:1"))
    assert text.endswith(" WARNING mysqlbackup.test: to mysql://u:***@h:1")


def test_json_formatter_exception():
    try:
        raise ValueError("boom at s3://k:s@b/p")
    except ValueError:
        import sys
        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    data = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom at s3://***@b/p" in data["exception"]


# py4j's java_gateway.py logs a connection reset through the root logger, as this does
PY4J_RESET = """
try:
    raise ConnectionResetError(104, "Connection reset by peer")
except ConnectionResetError:
    logging.exception("Exception while sending command.")
"""
OURS = {("info", "mysqlbackup.test", "ours"), ("warning", "mysqlbackup.test", "ours too")}
OUR_DEBUG = ("debug", "mysqlbackup.test", "our debug")
SPARKS = {("debug", "py4j.clientserver", "Exception while sending command: reset"),
          ("debug", "pyspark.core.context", "pyspark warns"),
          ("debug", "root", "Exception while sending command.")}


def _log_spark_and_ours():
    """Real logging calls: py4j's and pyspark's loggers at ERROR and WARNING, py4j's own
    code through the root logger (ERROR, with the exception), and ours."""
    from py4j import java_gateway
    logging.getLogger("py4j.clientserver").error("Exception while sending command: reset")
    logging.getLogger("pyspark.core.context").warning("pyspark warns")
    exec(compile(PY4J_RESET, java_gateway.__file__, "exec"), {"logging": logging})
    ours = logging.getLogger("mysqlbackup.test")
    ours.info("ours")
    ours.warning("ours too")
    ours.debug("our debug")


def _records(stderr, fmt):
    """(level, logger, event) of each record on ``stderr`` (text or json lines)."""
    if fmt == "json":
        return [(r["level"], r["logger"], r["event"])
                for r in map(json.loads, stderr.splitlines())]
    heads = [line.split(" ", 2)[2] for line in stderr.splitlines()
             if line[:4].isdigit()]  # a traceback's lines follow their record's
    return [(level.lower(), name.rstrip(":"), event)
            for level, name, event in (h.split(" ", 2) for h in heads)]


@pytest.fixture
def root_logging():
    """The root logger's handlers and level as they were after the test (the CLI's
    ``configure`` replaces ours), and the text format again (a later test's progress
    reporter must not find json in force)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    logs.configure("info", "text")
    root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("fmt", logs.FORMATS)
def test_spark_records_are_debug_output_only(root_logging, capsys, caplog, fmt):
    logs.configure("info", fmt)
    _log_spark_and_ours()
    err = capsys.readouterr().err
    assert sorted(_records(err, fmt)) == sorted(OURS), err
    assert "Connection reset" not in err and "py4j" not in err
    # other handlers (pytest's here) see py4j's record as it was logged
    assert ("py4j.clientserver", logging.ERROR) in [(r.name, r.levelno) for r in caplog.records]
    logs.configure("debug", fmt)
    _log_spark_and_ours()
    err = capsys.readouterr().err
    assert sorted(_records(err, fmt)) == sorted(OURS | SPARKS | {OUR_DEBUG}), err
    assert "ConnectionResetError: [Errno 104] Connection reset by peer" in err


@pytest.mark.parametrize("fmt", logs.FORMATS)
@pytest.mark.parametrize("level", ["info", "debug"])
def test_a_command_prints_spark_records_at_debug_only(root_logging, tmp_path, monkeypatch, fmt,
                                                     level):
    """Through the CLI: the records logged while a command runs (a gateway's thread
    logs at any moment) reach its stderr as its --log-level and --log-format say
    (``root_logging``: the text format again after a json run)."""
    checked = config.check_environment

    def check_and_log(*args):
        _log_spark_and_ours()
        return checked(*args)
    monkeypatch.setattr(config, "check_environment", check_and_log)
    done = run_cli("--log-level", level, "--log-format", fmt, "archive", "ls", "--archive",
                   f"file://{tmp_path}")
    assert done.returncode == 0, done.stderr
    expected = OURS | SPARKS | {OUR_DEBUG} if level == "debug" else OURS
    records = _records(done.stderr, fmt)
    assert records and set(records) == expected, done.stderr
    assert ("Connection reset" in done.stderr) is (level == "debug")


def test_daemon_logs_json_lines_with_positions(primary, tmp_path, monkeypatch):
    monkeypatch.setenv("MYSQLBACKUP_LOG_FORMAT", "json")  # the group's option, from the env
    primary.execute("CREATE DATABASE IF NOT EXISTS logs_json",
                    "CREATE TABLE IF NOT EXISTS logs_json.t (id INT PRIMARY KEY "
                    "AUTO_INCREMENT, v INT)")
    archive = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(primary, tmp_path / "d", "--archive", archive, "--archive-interval", "0.2",
                    server_id=913).start()
    try:
        wait_for(lambda: "streaming from" in daemon.output(), what="the daemon streaming")
        primary.execute("INSERT INTO logs_json.t (v) VALUES (1)", "FLUSH BINARY LOGS",
                        "INSERT INTO logs_json.t (v) VALUES (2)")
        wait_for(lambda: caught_up(primary, tmp_path / "d"), what="the daemon caught up")
        wait_for(lambda: '"event": "archived ' in daemon.output(), what="an upload logged")
    finally:
        assert daemon.stop() == 0
    records = [json.loads(line) for line in daemon.output().splitlines()]
    assert records and all({"time", "level", "logger", "event"} <= set(r) for r in records)
    started = next(r for r in records if r["event"].startswith("streaming from "))
    assert started["event"] == f"streaming from {started['file']}:{started['position']} " \
                               f"(semi-sync {'on' if started['semi_sync'] else 'off'}; " \
                               f"{speedups.describe()})"
    assert started["logger"] == "mysqlbackup.stream.daemon" and started["level"] == "info"
    rotated = next(r for r in records if r["event"].startswith("rotating "))
    assert rotated["event"] == f"rotating {rotated['file']} -> {rotated['next_file']}"
    assert isinstance(rotated["position"], int) and rotated["position"] > 4
    archived = next(r for r in records if r["event"].startswith("archived "))
    assert archived["event"].startswith(f"archived {archived['file']} ({archived['bytes']} bytes")
    assert archived["gtid"].count("-") == 2  # the file's last GTID, D-S-N


@pytest.mark.server
def test_failing_command_ends_with_one_json_line(tmp_path):
    done = run_cli("--log-format", "json", "stream", "--source", "mysql://repl@127.0.0.1:1",
                   "--server-id", "914", "--dir", str(tmp_path / "d"))
    assert done.returncode == 3, done.stderr
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert len(records) == 1
    assert {k: v for k, v in records[0].items() if k != "time"} == {
        "level": "error", "logger": "mysqlbackup", "exit_code": 3, "error": "SourceError",
        "event": "cannot connect to 127.0.0.1:1: Connection refused"}


@pytest.mark.server
def test_error_with_a_position_carries_it(tmp_path):
    (tmp_path / "binlog.000001").write_bytes(b"\xfebin" + b"\x00" * 30)
    done = run_cli("--log-format", "json", "archive", "import", str(tmp_path), "--archive",
                   f"file://{tmp_path / 'archive'}", "--source-name", "db1")
    records = [json.loads(line) for line in done.stderr.splitlines()]
    assert done.returncode == 6 and records[-1]["exit_code"] == 6, done.stderr
    assert (records[-1]["file"], records[-1]["error"]) == (str(tmp_path / "binlog.000001"),
                                                          "CorruptBinlog")
    assert isinstance(records[-1]["offset"], int)
