"""The README's first command, scripts/demo.sh: its drill (scripts/demo.py, after the
set-up the suite has already done) ends in "demo: OK", on MariaDB and on MySQL."""

import os
import subprocess
import sys

import pytest

from tests.helpers import REPO

DEMO = os.path.join(REPO, "scripts", "demo.py")


def run_demo(tmp_path, *extra):
    done = subprocess.run([sys.executable, DEMO, "--dir", str(tmp_path / "demo"),
                           "--transactions", "300", *extra], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("demo: OK in "), lines[-20:]
    return done.stdout


@pytest.mark.server
def test_the_demo_restores_to_just_before_the_drop(tmp_path):
    out = run_demo(tmp_path)
    assert "== 10. CHECKSUM TABLE" in out


@pytest.mark.mysql
def test_the_demo_on_mysql(tmp_path):
    from mysqlbackup.sandbox.mysql import why_no_mysql
    problem = why_no_mysql()
    if problem:
        pytest.skip(problem)
    out = run_demo(tmp_path, "--mysql")
    assert "== 10. CHECKSUM TABLE" in out
