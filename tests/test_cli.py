"""The command line through click's CliRunner: exit codes and exact output."""

import json
import shutil

from click.testing import CliRunner

from mysqlbackup.cli import main
from mysqlbackup.localdir.state import State, save_state


def invoke(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env or {"MYSQLBACKUP_PASSWORD": "x"})


def test_help_lists_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    assert "stream" in result.output and "status" in result.output


def test_password_in_url_is_refused(tmp_path):
    result = invoke("stream", "--source", "mysql://repl:secret@127.0.0.1:3306", "--server-id",
                    "5", "--dir", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr == ("mysqlbackup: error: do not put the password in the URL: use the "
                             "MYSQLBACKUP_PASSWORD environment variable or --password-file\n")


def test_bad_url_and_bad_gtid(tmp_path):
    result = invoke("stream", "--source", "http://x", "--server-id", "5", "--dir", str(tmp_path))
    assert result.exit_code == 2 and "expected mysql://USER@HOST:PORT" in result.stderr
    result = invoke("stream", "--source", "mysql://r@h:1", "--server-id", "5", "--dir",
                    str(tmp_path), "--start-gtid", "0-1")
    assert result.exit_code == 2
    assert result.stderr == "mysqlbackup: error: bad MariaDB GTID '0-1': expected " \
                            "DOMAIN-SERVER-SEQ\n"


def test_start_file_and_gtid_exclude_each_other(tmp_path):
    result = invoke("stream", "--source", "mysql://r@h:1", "--server-id", "5", "--dir",
                    str(tmp_path), "--start-file", "b.000001", "--start-gtid", "0-1-1")
    assert result.exit_code == 2 and "exclude each other" in result.output


def test_missing_password_file(tmp_path):
    result = invoke("stream", "--source", "mysql://r@h:1", "--server-id", "5", "--dir",
                    str(tmp_path), "--password-file", str(tmp_path / "nope"))
    assert result.exit_code == 2 and "cannot read password file" in result.stderr


def test_status_of_missing_dir(tmp_path):
    result = invoke("status", "--dir", str(tmp_path / "none"))
    assert result.exit_code == 1
    assert result.output == f"{tmp_path / 'none'}: no such directory\n"


def test_status_text_and_json(tmp_path, shared_binlog):
    shutil.copyfile(shared_binlog("rust_mysql_common/mariadb-bin.000001"),
                    tmp_path / "mariadb-bin.000001")
    save_state(str(tmp_path), State(
        file="mariadb-bin.000001", pos=1074, gtid="0-1-2", flavor="mariadb",
        source_identity="server-id-1", source_address="127.0.0.1:3306",
        last_ack={"file": "mariadb-bin.000001", "pos": 1074, "time": 1.0},
        source_position={"file": "mariadb-bin.000001", "pos": 1100, "time": 1.0}, updated=None))
    result = invoke("status", "--dir", str(tmp_path))
    assert result.exit_code == 0
    assert result.output.splitlines() == [
        f"directory:        {tmp_path}",
        "files:            1 (mariadb-bin.000001 .. mariadb-bin.000001, 1074 bytes)",
        "daemon:           none holds the lock",
        "source:           127.0.0.1:3306 (server-id-1, mariadb)",
        "durable position: mariadb-bin.000001:1074",
        "gtid set:         0-1-2",
        "last ack:         mariadb-bin.000001:1074",
        "lag:              26 bytes",
        "checkpoint age:   unknown",
        "primary:          purge horizon: not recorded yet",
    ]
    data = json.loads(invoke("status", "--dir", str(tmp_path), "--json").output)
    assert data["state"]["durable_pos"] == 1074 and data["files"][0]["size"] == 1074
