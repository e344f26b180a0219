"""``mysqlbackup serve`` against hostile and careless clients: a real serve process
(the CLI, as users run it) over the serve tests' archive, attacked on loopback with
raw sockets (tests/serve/rawclient.py), every loop bounded in count and time.

After each attack (the ``after_each`` check): the process is alive, a fresh login
gets its OK within a second, its descriptors and RSS are back near where they
started, and its log holds no traceback.
"""

import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import pytest

from replay.serve.protocol import packets as pk
from replay.serve.feed import BOGUS_DATA, IMPOSSIBLE_POSITION, NOT_IN_INDEX, read_error
from replay.serve.protocol.limits import FIRST_DELAY, FREE_FAILURES, HANDSHAKE_TIMEOUT, MAX_HANDSHAKES
from tests.helpers import wait_for
from tests.serve import rawclient as rc
from tests.serve.world import PASSWORD

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER = "mysqlbackup_serve"
HEARTBEAT = 27


class ServeProcess:
    """``mysqlbackup serve`` in a child process (its own descriptor limit when asked),
    its log in a file."""

    def __init__(self, archive, log_path, nofile=None, extra=()):
        self.log_path = log_path
        env = dict(os.environ, PYTHONPATH=REPO, MYSQLBACKUP_SERVE_PASSWORD=PASSWORD)

        def limit():
            if nofile:
                import resource
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mysqlbackup", "serve", "--archive", archive,
                 "--source-name", "db1", "--listen", "127.0.0.1:0", "--poll-interval", "0",
                 *extra], env=env, stdout=log, stderr=log, preexec_fn=limit)
        line = wait_for(lambda: re.search(r"on 127\.0\.0\.1:(\d+) ", self.log()), timeout=60,
                        what="serve listening")
        self.port = int(line.group(1))
        metrics = re.search(r"serving metrics at http://127\.0\.0\.1:(\d+)/", self.log())
        self.metrics_port = int(metrics.group(1)) if metrics else None

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def threads(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return kb / 1024

    def login_seconds(self, source="127.0.0.1"):
        """Seconds a fresh, correct login takes to its OK."""
        started = time.monotonic()
        sock, answer = rc.login(self.port, USER, PASSWORD, source)
        sock.close()
        assert answer[:1] == b"\x00", answer
        return time.monotonic() - started

    def metric(self, name):
        """The value of one sample of serve's metrics endpoint."""
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=5) as response:
            text = response.read().decode()
        return next(s.value for f in text_string_to_metric_families(text)
                    for s in f.samples if s.name == name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def served(archive, tmp_path_factory):
    proc = ServeProcess(archive, str(tmp_path_factory.mktemp("hostile") / "serve.log"),
                        extra=("--metrics-address", "127.0.0.1:0"))
    proc.login_seconds()  # warm: the first login's imports are not an attack's doing
    proc.start = (proc.fds(), proc.rss_mb())
    yield proc
    proc.stop()
    assert proc.proc.returncode == 0, proc.log()[-3000:]


@pytest.fixture
def after_each(served):
    """Runs the test, then checks that serve is whole again."""
    yield served
    check_whole(served)


def descriptors_back(served):
    """Wait until serve has closed what it opened since it started (but two)."""
    fds = served.start[0]
    wait_for(lambda: served.fds() <= fds + 2, timeout=HANDSHAKE_TIMEOUT + 5,
             what=f"serve's descriptors back to {fds} (now {served.fds()})")


def check_whole(served, rss_margin_mb=40):
    assert served.proc.poll() is None, served.log()[-3000:]
    assert served.login_seconds() < 1.0
    descriptors_back(served)
    assert served.rss_mb() < served.start[1] + rss_margin_mb
    assert "Traceback" not in served.log()


def answer_to(port, payload, seq=1, source="127.0.0.1"):
    """What serve answers ``payload`` sent as the handshake response (ERR payload)."""
    with rc.connect(port, source) as sock:
        rc.greeting(sock)
        rc.send_packet(sock, payload, seq)
        _, answer = rc.read_packet(sock)
        assert rc.closed_by_server(sock, 2.0)
    return rc.error_of(answer)


def logged_in(port):
    sock, answer = rc.login(port, USER, PASSWORD)
    assert answer[:1] == b"\x00", answer
    return sock


# --- before login -------------------------------------------------------------------

def test_long_user_names_and_huge_packets_are_answered_at_once(after_each):
    port = after_each.port
    started = time.monotonic()
    code, message = answer_to(port, rc.response(b"a" * 60000, b"x" * 20))
    assert code == pk.ER_ACCESS_DENIED and time.monotonic() - started < 1.0
    assert message == f"Access denied for user '{'a' * 128}'@'127.0.0.1' (using password: YES)"
    for size in (1 << 20, 40 << 20):  # one 1 MB packet; 16 MiB pieces chained
        with rc.connect(port) as sock:
            rc.greeting(sock)
            head = min(size, pk.MAX_PAYLOAD)
            sock.sendall(bytes([head & 0xFF, head >> 8 & 0xFF, head >> 16, 1]) + b"a" * 65536)
            _, answer = rc.read_packet(sock)
            assert rc.error_of(answer) == (pk.ER_NET_PACKET_TOO_LARGE, "Got a packet bigger "
                                           "than 'max_allowed_packet' bytes")
            assert rc.closed_by_server(sock, 3.0)
    assert "a packet of 1048576 bytes (before login)" in after_each.log()


@pytest.mark.parametrize("name, payload, seq", [
    ("auth length 0xFB", rc.response(b"u", raw_auth_length=b"\xfb"), 1),
    ("auth length 0xFF", rc.response(b"u", raw_auth_length=b"\xff" + b"x" * 20), 1),
    ("auth length 2**63",
     rc.response(b"u", raw_auth_length=b"\xfe" + struct.pack("<Q", 1 << 63)), 1),
    ("auth length cut short", rc.response(b"u", raw_auth_length=b"\xfe\x01\x02"), 1),
    ("10 garbage bytes", bytes.fromhex("9e11c407fa5b00d3882f"), 1),
    ("empty", b"", 1),
    ("no user terminator", rc.response(b"u")[:32] + b"u" * 30, 1),
])
def test_malformed_handshakes_get_bad_handshake(after_each, name, payload, seq):
    assert answer_to(after_each.port, payload, seq) == (pk.ER_HANDSHAKE_ERROR, "Bad handshake")


def test_packets_out_of_order_and_plain_http(after_each):
    good = rc.response(USER.encode(), b"x" * 20)
    assert answer_to(after_each.port, good, seq=5) == (pk.ER_NET_PACKETS_OUT_OF_ORDER,
                                                       "Got packets out of order")
    with rc.connect(after_each.port) as sock:  # a port scanner's or a browser's request
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert rc.closed_by_server(sock, 3.0)


def test_slow_and_idle_clients_cannot_keep_a_replica_out(after_each, capsys):
    """200 clients trickling a byte a second and a 1 MB user name in flight: a real login
    still gets in at once; every slow client is closed by the handshake's deadline."""
    port, slow, opened = after_each.port, [], time.monotonic()
    try:
        for _ in range(200):  # each announces a 100-byte packet, then sends it a byte a second
            slow.append(rc.connect(port, "127.0.0.3"))
            slow[-1].sendall(b"\x64\x00\x00\x01")
        big = rc.connect(port, "127.0.0.3")
        slow.append(big)
        big.sendall(b"\x4c\x00\x10\x01" + b"a" * 30000)  # a 1 MB user name, partly sent
        logins = [after_each.login_seconds() for _ in range(5)]
        with capsys.disabled():
            print(f"\n[serve hostile] login with 200 slow clients and a 1 MB user in flight: "
                  f"{max(logins) * 1000:.1f} ms at most of 5 (median "
                  f"{sorted(logins)[2] * 1000:.1f} ms); serve threads {after_each.threads()}, "
                  f"fds {after_each.fds()}")
        assert max(logins) < 1.0
        assert after_each.threads() < MAX_HANDSHAKES + 20
        open_ = list(slow)
        while open_ and time.monotonic() - opened < HANDSHAKE_TIMEOUT + 5:
            for sock in list(open_):
                try:
                    sock.send(b"a")
                except OSError:
                    open_.remove(sock)
            readable, _, _ = select.select(open_, [], [], 1.0)
            for sock in readable:
                try:
                    if not sock.recv(65536):
                        open_.remove(sock)
                except OSError:
                    open_.remove(sock)
        assert not open_, f"{len(open_)} slow clients still open after {HANDSHAKE_TIMEOUT} s"
    finally:
        for sock in slow:
            sock.close()
    assert "no whole packet in time (handshake)" in after_each.log()


def test_one_address_cannot_push_out_anothers_handshake(after_each):
    """A replica whose login is under way while one address floods new connections is
    not ended for them: the flood ends its own oldest first."""
    port = after_each.port
    legit = rc.connect(port)
    flood = []
    try:
        scramble = rc.greeting(legit)
        for _ in range(3 * MAX_HANDSHAKES):
            flood.append(rc.connect(port, "127.0.0.7"))
        rc.send_packet(legit, rc.response(USER.encode(), pk.native_token(PASSWORD, scramble)),
                       1)
        assert rc.read_packet(legit)[1][:1] == b"\x00"
    finally:
        legit.close()
        for sock in flood:
            sock.close()


def test_failed_logins_are_slowed_down_per_address(after_each):
    port, took = after_each.port, []
    refused = after_each.metric("mysqlbackup_serve_refused_logins_total")
    for _ in range(FREE_FAILURES + 2):
        started = time.monotonic()
        sock, answer = rc.login(port, USER, "wrong", source="127.0.0.4")
        sock.close()
        assert rc.error_of(answer)[0] == pk.ER_ACCESS_DENIED
        took.append(time.monotonic() - started)
    assert max(took[:FREE_FAILURES]) < FIRST_DELAY
    assert took[FREE_FAILURES] >= FIRST_DELAY and took[FREE_FAILURES + 1] >= 2 * FIRST_DELAY
    assert after_each.login_seconds("127.0.0.1") < FIRST_DELAY  # another address: at once
    # the right password from the throttled address waits too (no early answer to read)
    assert after_each.login_seconds("127.0.0.4") >= 4 * FIRST_DELAY
    assert after_each.login_seconds("127.0.0.4") < FIRST_DELAY  # a success forgave it
    assert after_each.metric("mysqlbackup_serve_refused_logins_total") == \
        refused + FREE_FAILURES + 2


def test_a_burst_of_connects_gets_handshakes_without_retries(after_each):
    socks, started = [], time.monotonic()
    try:
        for _ in range(200):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", after_each.port))
            socks.append(sock)
        _, writable, _ = select.select([], socks, [], 5.0)
        wait_for(lambda: len(select.select([], socks, [], 0)[1]) == len(socks), timeout=5,
                 what="every connect done")
        assert time.monotonic() - started < 0.9  # a dropped SYN is retried after 1 s
    finally:
        for sock in socks:
            sock.close()


def test_accept_survives_running_out_of_descriptors(archive, tmp_path):
    probe = ServeProcess(archive, str(tmp_path / "probe.log"))
    try:
        baseline = probe.fds()
    finally:
        probe.stop()
    served = ServeProcess(archive, str(tmp_path / "serve.log"), nofile=baseline + 12)
    held = []
    try:
        served.start = (served.fds(), served.rss_mb())
        for i in range(40):  # from 40 addresses: not bounded by the share of one address
            held.append(rc.connect(served.port, f"127.0.3.{i + 1}"))
        wait_for(lambda: "cannot accept connections: Too many open files" in served.log(),
                 timeout=10, what="accept out of descriptors")
        for sock in held:
            sock.close()
        held = []
        wait_for(lambda: _login_ok(served), timeout=HANDSHAKE_TIMEOUT + 5,
                 what="a login once the idle clients are gone")
        check_whole(served)
    finally:
        for sock in held:
            sock.close()
        served.stop()


def _login_ok(served):
    try:
        return served.login_seconds() < 1.0
    except (OSError, AssertionError):
        return False


# --- logged in ----------------------------------------------------------------------

def test_malformed_commands_get_the_servers_answers(after_each):
    with logged_in(after_each.port) as sock:
        for payload in (b"\x15", b"\x15\x01\x00"):
            rc.send_packet(sock, payload, 0)
            assert rc.error_of(rc.read_packet(sock)[1]) == (
                pk.ER_UNKNOWN_ERROR, "Failed to register slave: too long 'report-host'")
        rc.send_packet(sock, b"\x0e", 0)  # still there: PING
        assert rc.read_packet(sock)[1][:1] == b"\x00"
        assert rc.query(sock, "SET @master_heartbeat_period='abc', "
                              "@mariadb_slave_capability='x'")[:1] == b"\x00"
        for state in ("0-1-\u00b2", "0-1-" + "9" * 5000):  # a digit to str.isdigit, not int()
            assert rc.error_of(rc.query(sock, f"SET @slave_connect_state='{state}'"))[0] == 1105
        assert rc.error_of(rc.query(sock, "SELECT binlog_gtid_pos('binlog.000001', "
                                          + "9" * 5000 + ")"))[0] == pk.ER_NOT_SUPPORTED
    for short in (b"\x12", b"\x12\x04\x00\x00\x00", b"\x12" + bytes(9)):
        with logged_in(after_each.port) as sock:
            rc.query(sock, "SET @master_binlog_checksum=@@global.binlog_checksum")
            rc.send_packet(sock, short, 0)
            assert rc.error_of(rc.read_packet(sock)[1]) == (
                pk.ER_MASTER_FATAL_READING_BINLOG, NOT_IN_INDEX)
            assert rc.closed_by_server(sock, 2.0)


def test_patterns_and_values_cannot_freeze_the_server(after_each):
    with logged_in(after_each.port) as sock:
        for sql in ("SHOW VARIABLES LIKE '" + "%" * 40 + "X'",
                    "SET @a=" + " " * 64000 + "x" + " " * 64000 + "y",
                    "SELECT binlog_gtid_pos('" + "a" * 100000 + "', 4"):
            started = time.monotonic()
            rc.query(sock, sql)
            assert time.monotonic() - started < 1.0, sql[:40]
            # the answer may be several packets: drain what is left
            sock.settimeout(0.2)
            try:
                while sock.recv(65536):
                    pass
            except socket.timeout:
                pass
            sock.settimeout(5.0)
        rc.send_packet(sock, b"\x03" + b"x" * (2 << 20), 0)  # past 1 MiB after login
        assert rc.error_of(rc.read_packet(sock)[1])[0] == pk.ER_NET_PACKET_TOO_LARGE


def test_a_heartbeat_period_of_one_nanosecond_is_bounded(after_each):
    with logged_in(after_each.port) as sock:
        for sql in ("SET @master_heartbeat_period=1",
                    "SET @master_binlog_checksum=@@global.binlog_checksum"):
            assert rc.query(sock, sql)[:1] == b"\x00"
        rc.send_packet(sock, struct.pack("<BIHI", 0x12, 4, 0, 77), 0)
        beats, started = 0, time.monotonic()
        while time.monotonic() - started < 1.0:
            _, payload = rc.read_packet(sock)
            beats += payload[1 + 4] == HEARTBEAT
        assert 0 < beats <= 1100   # 1 ms at the least, as MASTER_HEARTBEAT_PERIOD's range


def test_a_dump_from_where_the_archive_has_no_event_is_refused(after_each, binlog_dir):
    names = sorted(os.listdir(binlog_dir))
    size = os.path.getsize(binlog_dir / names[0])
    first = names[0]
    cases = [("", 0xFFFFFFFF, read_error(IMPOSSIBLE_POSITION, "", 0xFFFFFFFF)),
             (first, size + 1, read_error(IMPOSSIBLE_POSITION, first, size + 1)),
             (first, 2, read_error(IMPOSSIBLE_POSITION, first, 2)),
             (first, 259, read_error(BOGUS_DATA, first, 259, 259, 278)),  # in the 2nd event
             ("nosuch.000001", 4, NOT_IN_INDEX), ("../" + first, 4, NOT_IN_INDEX)]
    for name, pos, message in cases:
        with logged_in(after_each.port) as sock:
            rc.query(sock, "SET @master_binlog_checksum=@@global.binlog_checksum")
            rc.send_packet(sock, struct.pack("<BIHI", 0x12, pos, 0, 78) + name.encode(), 0)
            answer = rc.read_packet(sock)[1]
            while answer[:1] == b"\x00":  # inside an event: its file's ROTATE and FDE first,
                answer = rc.read_packet(sock)[1]  # as mariadbd sends them
            code, text = rc.error_of(answer)
            assert (code, text) == (pk.ER_MASTER_FATAL_READING_BINLOG, message), (name, pos)


def test_random_packets_never_end_in_a_traceback(after_each):
    """A bounded fuzz over the socket: random payloads before and after login."""
    import random
    rnd = random.Random(25)
    for i in range(150):
        payload = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 200)))
        if i % 2:
            with logged_in(after_each.port) as sock:
                rc.send_packet(sock, payload, 0)
                rc.closed_by_server(sock, 0.05)
        else:
            with rc.connect(after_each.port) as sock:
                rc.greeting(sock)
                rc.send_packet(sock, payload, 1)
                rc.closed_by_server(sock, 0.5)


def test_connections_past_the_caps_get_too_many_connections(archive, tmp_path):
    """Two replicas logged in at most: a third login gets 1040 after its handshake, as
    from mariadbd; past the handshakes' cap too, a connection gets 1040 at once."""
    served = ServeProcess(archive, str(tmp_path / "serve.log"), extra=("--max-connections", "2"))
    held = []
    try:
        served.start = (served.fds(), served.rss_mb())
        held += [logged_in(served.port), logged_in(served.port)]
        sock, answer = rc.login(served.port, USER, PASSWORD)
        sock.close()
        assert rc.error_of(answer) == (pk.ER_CON_COUNT_ERROR, "Too many connections")
        for i in range(MAX_HANDSHAKES):  # idle, not logged in, from as many addresses
            held.append(rc.connect(served.port, f"127.0.2.{i + 1}"))  # the server is full
            rc.greeting(held[-1])
        with rc.connect(served.port) as sock:  # mariadbd's bytes: no handshake, no SQLSTATE
            assert rc.read_packet(sock) == (0, b"\xff\x10\x04Too many connections")
        for sock in held:
            sock.close()
        held = []
        # each closed connection leaves the counts when serve reads its end: every one
        # of them first (a login tried before might count against what is still there)
        descriptors_back(served)
        check_whole(served)  # a login once the others left
    finally:
        for sock in held:
            sock.close()
        served.stop()


def test_the_recovery_window_is_on_serves_endpoint_too(served):
    """serve's metrics carry the served archive's recovery window, as the daemon's do."""
    def read(name):
        try:
            return served.metric(name)
        except StopIteration:
            return None
    wait_for(lambda: read("mysqlbackup_recovery_window_age_seconds") is not None,
             what="the recovery window's first reading")
    assert read("mysqlbackup_archive_holes") >= 0
    assert 0 <= read("mysqlbackup_recovery_window_age_seconds") < 60
