"""contrib/prometheus: the alerting rules for mysqlbackup's metrics load in Prometheus
(``promtool check rules``), each alert fires where it should and stays quiet where it
should not (``promtool test rules``, Debian's prometheus package, which scripts/setup.sh
installs), and every metric the rules read is one the tool exports."""

import os
import re
import shutil
import subprocess

import pytest

from tests.helpers import REPO

RULES = os.path.join(REPO, "contrib", "prometheus")


def promtool(*args):
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (Debian's prometheus package: scripts/setup.sh "
                    "installs it)")
    return subprocess.run([tool, *args], cwd=RULES, capture_output=True, text=True,
                          timeout=60)


@pytest.mark.server
def test_the_rules_load_and_their_unit_tests_pass():
    checked = promtool("check", "rules", "mysqlbackup.rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout
    tested = promtool("test", "rules", "mysqlbackup.rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_metric_a_rule_reads_is_exported():
    rules = open(os.path.join(RULES, "mysqlbackup.rules.yml"), encoding="utf-8").read()
    used = set(re.findall(r"\bmysqlbackup_[a-z_]+", rules))
    source = ""
    for folder in ("mysqlbackup", "replay"):
        for root, _, names in os.walk(os.path.join(REPO, folder)):
            for name in names:
                if name.endswith(".py"):
                    source += open(os.path.join(root, name), encoding="utf-8").read()
    assert used and {m for m in used if f'"{m}"' not in source} == set()
    tested = open(os.path.join(RULES, "mysqlbackup.rules.test.yml"), encoding="utf-8").read()
    alerts = set(re.findall(r"- alert: (\w+)", rules))
    assert alerts == set(re.findall(r"alertname: (\w+)", tested))  # each one tested
