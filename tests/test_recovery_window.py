"""`archive ls` shows base backups and the recovery window; `verify` checks bases (real
server, daemon and base backup; the archive on file://)."""

import json
import os

import pytest

from mysqlbackup.archive.names import BASE_MEMBERS
from tests.helpers import Daemon, run_cli, wait_for, wait_semi_sync_client


def ls(url, *extra):
    out = run_cli("archive", "ls", "--archive", url, "--source-name", "db1", *extra)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """(server, archive URL, archive dir, base manifest): a base, then more transactions."""
    from mysqlbackup.sandbox import MariaDBSandbox
    tmp = tmp_path_factory.mktemp("window")
    server = MariaDBSandbox(str(tmp / "primary"), server_id=41).start()
    url = f"file://{tmp / 'archive'}"
    daemon = Daemon(server, tmp / "backup", "--archive", url, "--source-name", "db1",
                    "--archive-interval", "0.2", server_id=4101).start()
    try:
        wait_semi_sync_client(server)
        server.execute("CREATE DATABASE shop", "CREATE TABLE shop.t (id INT PRIMARY KEY)",
                       *[f"INSERT INTO shop.t VALUES ({i})" for i in range(10)])
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}", "--archive",
                       url, "--source-name", "db1", password="")
        assert base.returncode == 0, base.stderr
        server.execute(*[f"INSERT INTO shop.t VALUES ({i})" for i in range(10, 20)],
                       "FLUSH BINARY LOGS", "INSERT INTO shop.t VALUES (20)",
                       "FLUSH BINARY LOGS", "INSERT INTO shop.t VALUES (21)")
        gtid = server.execute("SELECT @@gtid_binlog_pos")[0][0]
        wait_for(lambda: [f["last_gtid"] for f in json.loads(ls(url, "--json"))["files"]][-1:]
                 == [gtid],
                 timeout=30, what="the archive to hold every transaction")
    finally:
        daemon.stop()
        server.stop()
    manifest, = json.loads(ls(url, "--json"))["bases"]
    yield url, str(tmp / "archive"), manifest


@pytest.mark.server
def test_archive_ls_names_the_base_and_the_window(archived):
    url, _, base = archived
    files = json.loads(ls(url, "--json"))["files"]
    lines = ls(url).splitlines()
    import re
    line = re.compile(re.escape(f"db1  base {base['id']}  dump  ended {base['end_time']} (")
                      + r"\d+[smhd]( \d+[smhd])? ago"  # its age, as the clock runs on
                      + re.escape(f")  {base['stored_size']} bytes stored  gtid "
                                  f"{base['gtid']}  sound"))
    assert [found for found in lines if line.fullmatch(found)], lines
    assert (f"db1  restorable from {base['end_time']} to {files[-1]['last_commit']} (base "
            f"{base['id']}, up to GTID {files[-1]['last_gtid']}, {files[0]['file']} .. "
            f"{files[-1]['file']})") in lines
    window, = json.loads(ls(url, "--json"))["windows"]
    assert (window["base_id"], window["start"], window["end_gtid"]) == (
        base["id"], base["end_time"], files[-1]["last_gtid"])
    assert not [line for line in lines if "hole" in line or "PROBLEM" in line]


@pytest.mark.server
def test_a_hole_after_the_base_splits_the_window(archived, tmp_path):
    url, root, base = archived
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    files = json.loads(ls(url, "--json"))["files"]
    sealed = [f["file"] for f in files if f["kind"] == "sealed"]
    gone = sealed[-1]  # the last sealed file: after the base, before the active one
    os.remove(copy / "db1" / "binlog" / gone)
    os.remove(copy / "db1" / "binlog" / f"{gone}.json")
    out = ls(f"file://{copy}")
    hole = [line for line in out.splitlines() if "hole:" in line]
    assert len(hole) == 1 and f"db1/binlog/{gone} is missing" in hole[0], out
    window, = json.loads(ls(f"file://{copy}", "--json"))["windows"]
    assert (window["first_file"], window["last_file"]) == (sealed[0], sealed[-2])
    os.remove(copy / "db1" / "binlog" / sealed[0])  # the base's own file
    os.remove(copy / "db1" / "binlog" / f"{sealed[0]}.json")
    out = ls(f"file://{copy}")
    assert f"db1  base {base['id']} not usable: its GTID {base['gtid']} is not in the " \
           f"archived binlogs" in out, out


@pytest.mark.server
def test_verify_checks_the_base_object_against_its_manifest(archived, tmp_path):
    url, root, base = archived
    out = run_cli("verify", "--archive", url, "--source-name", "db1")
    assert out.returncode == 0, out.stdout
    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    obj = copy / "db1" / "base" / base["id"] / BASE_MEMBERS["dump"]
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    out = run_cli("verify", "--archive", f"file://{copy}", "--source-name", "db1")
    assert out.returncode == 1
    assert f"PROBLEM db1/base/{base['id']}/dump.sql.zst: sha256 " in out.stdout
    os.remove(copy / "db1" / "base" / base["id"] / "index.json")
    out = run_cli("verify", "--archive", f"file://{copy}", "--source-name", "db1")
    assert out.returncode == 0, out.stdout
    assert f"NOTE db1/base/{base['id']}: no manifest (an upload in flight or abandoned): " \
           "not used by restore" in out.stdout
    assert "no moment is restorable yet" in ls(f"file://{copy}")
