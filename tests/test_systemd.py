"""The systemd units in contrib/systemd and the notify protocol (issue 13, item 7).

``systemd-analyze verify`` runs on copies of the units named as instances (db1),
their ExecStart binary replaced by this virtualenv's ``mysqlbackup`` (verify refuses a
command that does not exist; it needs no systemd as PID 1). The notify test runs the
stream unit's own ExecStart line (%i, the directory and $CREDENTIALS_DIRECTORY put
in place, the variables from an env file written as the unit reads one) against a
throwaway MariaDB, with $NOTIFY_SOCKET a datagram socket the test opens itself."""

import configparser
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from mysqlbackup.localdir.state import load_state
from mysqlbackup.sandbox import REPL_PASSWORD
from tests.helpers import REPO, cli_env, current_binlog, module_primary, wait_for

UNITS = os.path.join(REPO, "contrib", "systemd")
INSTALLED = "/usr/local/bin/mysqlbackup"
ENTRY = os.path.join(os.path.dirname(sys.executable), "mysqlbackup")


def _unit(name):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(os.path.join(UNITS, name))
    return parser


def _instances(tmp_path, text_of=lambda text: text):
    """Copies of the units as instances of db1, ExecStart on this virtualenv."""
    if not os.access(ENTRY, os.X_OK):
        pytest.skip(f"no mysqlbackup entry point beside {sys.executable} (pip install -e .)")
    paths = []
    tmp_path.mkdir(exist_ok=True)
    for name in ("mysqlbackup@.service", "mysqlbackup-base@.service",
                 "mysqlbackup-base@.timer"):
        with open(os.path.join(UNITS, name), encoding="utf-8") as f:
            text = text_of(f.read().replace(INSTALLED, ENTRY))
        path = tmp_path / name.replace("@.", "@db1.")
        path.write_text(text)
        paths.append(str(path))
    return paths


def _verify(paths):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze is not installed")
    out = subprocess.run([tool, "verify", "--man=no", *paths], capture_output=True, text=True,
                         timeout=60)
    return out.returncode, out.stdout + out.stderr


@pytest.mark.server
def test_units_verify(tmp_path):
    assert _verify(_instances(tmp_path)) == (0, "")
    # the check is not vacuous: a wrong value is reported
    broken = _instances(tmp_path / "broken", lambda t: t.replace("Type=notify", "Type=notif"))
    code, output = _verify(broken)
    assert "Failed to parse service type, ignoring: notif" in output


def test_unit_settings():
    stream, base, timer = (_unit("mysqlbackup@.service"), _unit("mysqlbackup-base@.service"),
                           _unit("mysqlbackup-base@.timer"))
    service = stream["Service"]
    assert (service["Type"], service["Restart"], service["RestartPreventExitStatus"]) == (
        "notify", "on-failure", "2 7")
    args = shlex.split(service["ExecStart"])
    assert args[:2] == [INSTALLED, "stream"]
    assert service["ReadWritePaths"] == args[args.index("--dir") + 1] == \
        "/var/lib/mysqlbackup/%i"
    for unit in (service, base["Service"]):
        assert (unit["ProtectSystem"], unit["NoNewPrivileges"], unit["PrivateTmp"],
                unit["ProtectHome"]) == ("strict", "yes", "yes", "yes")
        assert unit["EnvironmentFile"] == "/etc/mysqlbackup/%i.env"
    assert shlex.split(base["Service"]["ExecStart"])[:2] == [INSTALLED, "base"]
    assert timer["Timer"]["Persistent"] == "true" and timer["Timer"]["RandomizedDelaySec"]


def test_service_units_raise_the_descriptor_limit():
    """Running out of descriptors stops a backup (issue 25: the archiver died of EMFILE):
    every service asks for 65536, not systemd's soft default of 1024."""
    services = sorted(name for name in os.listdir(UNITS) if name.endswith(".service"))
    assert services == ["mysqlbackup-base@.service", "mysqlbackup@.service"]
    for name in services:
        assert _unit(name)["Service"]["LimitNOFILE"] == "65536", name


def _env_file(path):
    """KEY=VALUE lines of an EnvironmentFile (comments and blank lines skipped)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f]
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


@pytest.mark.server
def test_example_env_names_are_the_commands_options():
    """Every variable of the example env file is one that ``mysqlbackup`` reads."""
    env = _env_file(os.path.join(UNITS, "mysqlbackup.env.example"))
    for command in ("stream", "base"):
        out = subprocess.run([sys.executable, "-m", "mysqlbackup", "config", "show", command],
                             env=dict(cli_env(), **env), capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        taken = set(re.findall(r"# env (MYSQLBACKUP_\w+)", out.stdout))
        wanted = {k for k in env if k.startswith((f"MYSQLBACKUP_{command.upper()}_",
                                                  "MYSQLBACKUP_LOG_"))}
        assert wanted and wanted <= taken, wanted - taken


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = module_primary(tmp_path_factory, "notify-primary", "CREATE DATABASE n",
                         "CREATE TABLE n.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
    yield srv
    srv.stop(remove=True)


class Listener:
    """The AF_UNIX datagram socket systemd would listen on, read by a thread as the
    messages come: (arrival time, fields) per message."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.05)
        self.messages, self.done = [], threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while not self.done.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().split("\n"))
            self.messages.append((time.monotonic(), fields))

    def close(self):
        self.done.set()
        self.thread.join()
        self.sock.close()

    def having(self, key, value=None):
        return [(t, m) for t, m in list(self.messages)
                if key in m and (value is None or m[key] == value)]


def _unit_command(tmp_path, env):
    """The stream unit's ExecStart for instance db1, as systemd would run it."""
    args = shlex.split(_unit("mysqlbackup@.service")["Service"]["ExecStart"])
    args = [a.replace("%i", "db1").replace("/var/lib/mysqlbackup", str(tmp_path / "lib"))
            for a in args]
    args = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], a) for a in args]
    return [ENTRY if a == INSTALLED else a for a in args]


@pytest.mark.server
def test_notify_protocol(server, tmp_path):
    if not os.access(ENTRY, os.X_OK):
        pytest.skip(f"no mysqlbackup entry point beside {sys.executable}")
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "password").write_text(REPL_PASSWORD + "\n")
    env_file = tmp_path / "db1.env"  # heartbeats every 30 s: READY can only come from an ACK
    env_file.write_text(f"MYSQLBACKUP_STREAM_SOURCE={server.url}\n"
                        "MYSQLBACKUP_STREAM_SERVER_ID=88\nMYSQLBACKUP_STREAM_HEARTBEAT=30\n")
    listener = Listener(str(tmp_path / "notify.sock"))
    env = dict(os.environ, **_env_file(env_file), CREDENTIALS_DIRECTORY=str(credentials),
               NOTIFY_SOCKET=listener.path, WATCHDOG_USEC="1000000")
    env.pop("MYSQLBACKUP_PASSWORD", None)
    directory = tmp_path / "lib" / "db1"
    log = open(tmp_path / "daemon.log", "wb")
    proc = subprocess.Popen(_unit_command(tmp_path, env), env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    started = time.monotonic()
    try:
        # the source asks for an ACK once this replica caught up (semi-sync on again);
        # heartbeats come every 30 s, so READY can only follow that ACK
        end = (current_binlog(server), int(server.execute("SHOW MASTER STATUS")[0][1]))
        ready = wait_for(lambda: listener.having("READY", "1"), 20, what="READY=1")
        assert len(ready) == 1
        assert ready[0][1]["STATUS"].startswith(f"durable {end[0]}:{end[1]} gtid ")
        assert ready[0][1]["STATUS"].endswith(f", last ack {end[0]}:{end[1]}")
        ack = wait_for(lambda: load_state(str(directory)).last_ack, 5, what="the checkpoint")
        assert (ack["file"], ack["pos"]) == end
        assert os.path.getsize(directory / end[0]) == end[1]

        server.execute("INSERT INTO n.t (v) VALUES (2)", "INSERT INTO n.t (v) VALUES (3)")
        moved = (current_binlog(server), int(server.execute("SHOW MASTER STATUS")[0][1]))
        wait_for(lambda: [m for _, m in listener.having("STATUS") if m["STATUS"].startswith(
            f"durable {moved[0]}:{moved[1]} ")], 10, what="STATUS= with the new position")
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=30)
        log.close()
        time.sleep(0.1)
        listener.close()
    assert code == 0
    assert listener.having("STOPPING", "1")
    pings = [t for t, _ in listener.having("WATCHDOG", "1")]
    span = pings[-1] - started
    # half of WATCHDOG_USEC (0.5 s), from the loop, which looks every 0.5 s at most
    assert len(pings) >= span / 1.0 - 1, (len(pings), span)
    # stamped on receipt: a late wake-up of the listener shortens the next gap a little
    assert min(b - a for a, b in zip(pings, pings[1:])) >= 0.35
    assert max(b - a for a, b in zip(pings, pings[1:])) <= 2.0
