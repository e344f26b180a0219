"""S3 Object Lock (moto's, on a bucket created with it): ``--archive-option
lock_mode=... lock_days=N`` gives every object the archive writes (binlogs, indexes,
bases, manifests) a retain-until date; ``retain`` never asks to delete a locked object,
says which it keeps and until when, and exits 0; the options are refused where they
cannot hold (not S3, a bad value, one without the other)."""

import json
import shutil
import time

import boto3
import pytest

from mysqlbackup.archive.store import ArchiveStore
from tests.helpers import run_cli, wait_for

pytestmark = pytest.mark.server


def lock_bucket(s3, name):
    boto3.client("s3", endpoint_url=s3.endpoint, region_name="us-east-1").create_bucket(
        Bucket=name, ObjectLockEnabledForBucket=True)
    return f"s3://{name}/backups"


def test_locked_objects_are_kept_by_retain(s3, make_server, tmp_path):
    server = make_server()
    url = lock_bucket(s3, "locked-" + str(int(time.time() * 1000)))
    options = ["--archive-option", f"endpoint_url={s3.endpoint}",
               "--archive-option", "lock_mode=governance", "--archive-option", "lock_days=2"]
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   "INSERT INTO d.t VALUES (1)", "FLUSH BINARY LOGS")
    for _ in range(2):  # two bases: the older one and the binlogs before the newer may go
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                       "--archive", url, "--source-name", "db1", *options, password="",
                       timeout=120)
        assert base.returncode == 0, base.stderr
        server.execute("INSERT INTO d.t SELECT MAX(id) + 1 FROM d.t", "FLUSH BINARY LOGS")
    folder = tmp_path / "binlogs"
    folder.mkdir()
    for name in server.binlog_files()[:-1]:
        shutil.copyfile(server.binlog_path(name), folder / name)
    done = run_cli("archive", "import", str(folder), "--archive", url, "--source-name", "db1",
                   *options)
    assert done.returncode == 0, done.stderr

    store = ArchiveStore(url, {"endpoint_url": s3.endpoint})
    keys = store.list("")
    assert keys
    untils = [store.retain_until(k) for k in keys]
    assert all(u is not None and time.time() + 86400 < u <= time.time() + 2 * 86400 + 60
               for u in untils), untils  # every object written: a day and more to go

    retain = ["retain", "--archive", url, "--archive-option", f"endpoint_url={s3.endpoint}",
              "--window", "1s", "--json"]

    def locked_in_plan():  # once the newer base is older than the window: the rest may go
        out = run_cli(*retain, "--dry-run")
        kept = out.returncode == 0 and json.loads(out.stdout)["sources"][0]["kept_by_lock"]
        return kept and "base" in {i["kind"] for i in kept}
    wait_for(locked_in_plan, timeout=30, what="a plan that may delete the older base")
    kept = run_cli(*retain, "--yes")
    assert kept.returncode == 0, kept.stderr
    [outcome] = json.loads(kept.stdout)["sources"]
    assert outcome["deleted"] == [] and outcome["deletions"] == []
    [planned] = json.loads(run_cli(*retain, "--dry-run").stdout)["sources"]
    assert planned["window_after"] == planned["window_before"]  # the plan keeps them all
    kinds = {i["kind"] for i in outcome["kept_by_lock"]}
    assert "base" in kinds and "binlog" in kinds, outcome["kept_by_lock"]
    assert all(i["until"] for i in outcome["kept_by_lock"])
    assert sorted(store.list("")) == sorted(keys)  # nothing hidden behind a delete marker
    recorded = [json.loads(store.read(k)) for k in keys if k.endswith(".json")
                and "/lease/" not in k]  # every index and manifest records the lock
    assert recorded and all(r["lock"] == {"mode": "governance", "days": 2} for r in recorded)

    verified = run_cli("verify", "--archive", url, "--archive-option",
                       f"endpoint_url={s3.endpoint}")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"LOCK {len(keys)} of {len(keys)} objects locked (governance), the soonest until " \
        in verified.stdout

    said = run_cli("retain", "--archive", url, "--archive-option",
                   f"endpoint_url={s3.endpoint}", "--window", "1s", "--dry-run")
    assert said.returncode == 0, said.stderr
    assert "kept by lock until " in said.stdout


@pytest.mark.parametrize("options, said", [
    (["lock_mode=governance"], "lock_mode and lock_days go together"),
    (["lock_mode=forever", "lock_days=3"], "bad --archive-option lock_mode=forever"),
    (["lock_mode=compliance", "lock_days=0"], "bad --archive-option lock_days=0"),
])
def test_bad_lock_options_are_refused_in_one_line(s3, options, said):
    args = [a for o in options for a in ("--archive-option", o)]
    done = run_cli("archive", "ls", "--archive", "s3://nobucket/x", "--archive-option",
                   f"endpoint_url={s3.endpoint}", *args)
    assert done.returncode == 2
    assert said in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_lock_on_a_store_without_locks_is_refused(tmp_path):
    done = run_cli("archive", "import", str(tmp_path), "--archive", f"file://{tmp_path}/a",
                   "--source-name", "db1",
                   "--archive-option", "lock_mode=governance", "--archive-option",
                   "lock_days=3")
    assert done.returncode == 2
    assert "need an s3:// archive (S3 Object Lock), not file://" in done.stderr


def test_check_catches_a_lock_shorter_than_the_window(s3, make_server):
    server = make_server()
    url = lock_bucket(s3, "checked-" + str(int(time.time() * 1000)))
    endpoint = ["--archive-option", f"endpoint_url={s3.endpoint}"]
    lock = ["--archive-option", "lock_mode=compliance", "--archive-option", "lock_days=7"]
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY)",
                   "INSERT INTO d.t VALUES (1)", "FLUSH BINARY LOGS")
    base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}", "--archive",
                   url, "--source-name", "db1", *endpoint, *lock, password="", timeout=120)
    assert base.returncode == 0, base.stderr

    def check(window):
        done = run_cli("check", "--archive", url, *endpoint, "--retain-window", window,
                       "--max-base-age", "30d", "--json")
        checks = {c["name"]: c for c in json.loads(done.stdout)["sources"][0]["checks"]}
        return done.returncode, checks["lock"]
    code, lock_check = check("7d")
    assert lock_check["ok"] is True, lock_check
    assert "locked (compliance) for 7d" in lock_check["detail"]
    code, lock_check = check("14d")
    assert code == 2 and lock_check["ok"] is False
    assert "less than the window of 14d" in lock_check["detail"]
    plain = run_cli("check", "--archive", url, *endpoint, "--max-base-age", "30d", "--json")
    assert "lock" not in {c["name"] for c in json.loads(plain.stdout)["sources"][0]["checks"]}
