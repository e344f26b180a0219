"""Hostile clients against the metrics endpoint (issue 25, part 3).

First ``httpd.MetricsServer`` alone with small limits (the cap, the deadlines, the size
limit, the methods and paths, close). Then a real ``mysqlbackup stream`` process with
``--metrics-address`` and a file:// archive, run under ``prlimit --nofile=256:256``,
against a throwaway MariaDB primary: idle connections held by the hundred, clients that
send one byte a second, 100 KB request heads, garbage, a burst of parallel connects.
After each the endpoint answers at once, the daemon still makes transactions durable,
checkpoints and archives them, its descriptors and memory are back where they started
and its log holds no traceback. Every socket is loopback and closed in a finally."""

import errno
import json
import os
import resource
import select
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry, Counter

from mysqlbackup import httpd
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.httpd import Limits, MetricsServer
from mysqlbackup.localdir.state import load_state
from mysqlbackup.sandbox import free_port
from tests.helpers import (
    Daemon,
    caught_up,
    current_binlog,
    module_primary,
    wait_archived_to_the_end,
    wait_for,
)

NOFILE = 256               # the daemon's descriptor limit, soft and hard
IDLE = 300                 # idle connections held at once: more than NOFILE
BURST = 200                # connections opened in parallel
CAP = Limits().max_connections
DEADLINE = Limits().request_timeout
SERVER_FDS = CAP + 5 * httpd.ACCEPT_BATCH + 2  # what the server may add to the daemon's count
RSS_SLACK_KB = 16 * 1024
GET = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"


# -- the server alone ---------------------------------------------------------------------


@pytest.fixture
def small():
    """A server with small limits, its registry holding one counter of its own."""
    registry = CollectorRegistry()
    Counter("probe", "a sample to find in the body", registry=registry).inc(7)
    limits = Limits(max_connections=4, request_timeout=0.5, write_timeout=0.5,
                    max_request_bytes=1024)
    server = MetricsServer(registry, ("127.0.0.1", 0), limits, counters="t_http").start()
    yield server
    server.close()


def connect(port, timeout=5):
    return socket.create_connection(("127.0.0.1", port), timeout=timeout)


def exchange(port, data, timeout=5):
    """Send ``data``, read to the end: (the bytes read, 'eof' or 'reset')."""
    with connect(port, timeout) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before the whole request was sent
        return read_to_end(sock)


def read_to_end(sock):
    got = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return got, "reset"
        if not chunk:
            return got, "eof"
        got += chunk


def status_of(answer):
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else None


def counted(server, what):
    return server.registry.get_sample_value(f"t_http_{what}_total")


def test_server_answers_get_and_head_of_two_paths_only(small):
    for path in ("/", "/metrics", "/metrics?name[]=probe"):
        answer, end = exchange(small.port, f"GET {path} HTTP/1.1\r\n\r\n".encode())
        head, body = answer.split(b"\r\n\r\n", 1)
        assert (status_of(head), end) == (200, "eof")
        assert b"\r\nConnection: close" in head and b"probe_total 7.0\n" in body
        assert f"Content-Length: {len(body)}".encode() in head
    head, end = exchange(small.port, b"HEAD /metrics HTTP/1.0\n\n")  # bare newlines too
    assert status_of(head) == 200 and head.endswith(b"\r\n\r\n") and b"probe" not in head
    assert status_of(exchange(small.port, b"POST /metrics HTTP/1.1\r\n\r\n")[0]) == 405
    assert status_of(exchange(small.port, b"GET /other HTTP/1.1\r\n\r\n")[0]) == 404
    assert status_of(exchange(small.port, b"GET /metrics SPDY/3\r\n\r\n")[0]) == 400
    assert status_of(exchange(small.port, b"\x00\xff\r\n\r\n")[0]) == 400
    assert counted(small, "bad_requests") == 4
    with urllib.request.urlopen(f"http://127.0.0.1:{small.port}/metrics", timeout=5) as r:
        assert r.status == 200 and b"probe_total 7.0" in r.read()


def test_server_caps_connections_and_cuts_idle_ones_at_the_deadline(small):
    held = []
    try:
        held = [connect(small.port) for _ in range(4)]
        wait_for(lambda: len(small.connections) == 4, 5, 0.01, "4 admitted connections")
        started = time.monotonic()
        answer, _ = exchange(small.port, GET)
        assert status_of(answer) == 503 and b"too many connections" in answer
        assert time.monotonic() - started < 0.5 and counted(small, "refused") == 1
        for sock in held:  # cut off by the server at the request deadline
            assert read_to_end(sock)[0] == b""
        assert 0.4 < time.monotonic() - started < 2.0
        assert counted(small, "timeouts") == 4
        wait_for(lambda: not small.connections, 5, 0.01, "no connection left")
        assert status_of(exchange(small.port, GET)[0]) == 200
    finally:
        for sock in held:
            sock.close()


def test_server_bounds_the_request_head(small):
    started = time.monotonic()
    answer, _ = exchange(small.port, b"GET / HTTP/1.1\r\nX: " + b"a" * 100_000 + b"\r\n\r\n")
    assert status_of(answer) == 431 and time.monotonic() - started < 1.0
    answer, _ = exchange(small.port, b"GET / HTTP/1.1\r\nX: " + b"a" * 1010 + b"\r\n\r\n")
    assert status_of(answer) == 431  # a whole head of 1033 bytes: 1024 at most
    assert counted(small, "bad_requests") == 2


def test_server_write_deadline_cuts_off_a_client_that_never_closes(small):
    with connect(small.port) as sock:
        sock.sendall(GET)
        started = time.monotonic()
        wait_for(lambda: counted(small, "timeouts") == 1, 5, 0.01, "the write deadline")
        assert 0.4 < time.monotonic() - started < 2.0
        answer, end = read_to_end(sock)  # the response was sent before the cut
        assert status_of(answer) == 200 or end == "reset"


class Broken:
    """A collector with a bug."""

    def collect(self):
        raise ValueError("no sample today")


def test_server_answers_500_when_a_collector_fails(small, caplog):
    broken = Broken()
    small.registry.register(broken)
    answer, _ = exchange(small.port, GET)
    assert status_of(answer) == 500 and answer.endswith(b"cannot collect the metrics\n")
    assert "metrics: cannot collect: ValueError: no sample today" in caplog.text
    small.registry.unregister(broken)
    assert status_of(exchange(small.port, GET)[0]) == 200


def test_server_port_in_use_and_close(small):
    with pytest.raises(OSError) as raised:
        MetricsServer(CollectorRegistry(), ("127.0.0.1", small.port)).start()
    assert raised.value.errno == errno.EADDRINUSE
    held = connect(small.port)
    try:
        wait_for(lambda: small.connections, 5, 0.01, "one admitted connection")
        thread = small.thread
        small.close()
        assert not thread.is_alive() and read_to_end(held)[0] == b""
        with pytest.raises(ConnectionRefusedError):
            connect(small.port).close()
        small.close()  # twice: nothing happens
    finally:
        held.close()


EMFILE_SCRIPT = r"""
import json, logging, os, resource, socket, threading, time
from prometheus_client import CollectorRegistry
from mysqlbackup.httpd import MetricsServer

complained = threading.Event()
class Seen(logging.Handler):
    def emit(self, record):
        if "out of system resource" in record.getMessage():
            complained.set()
logging.basicConfig(level=logging.INFO)
logging.getLogger().addHandler(Seen())
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
server = MetricsServer(CollectorRegistry(), ("127.0.0.1", 0)).start()
fillers = []
try:
    while True:
        fillers.append(os.open("/dev/null", os.O_RDONLY))
except OSError:
    os.close(fillers.pop())  # one left: the client's socket; none for the accept
client = socket.create_connection(("127.0.0.1", server.port), timeout=5)
client.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
seen = complained.wait(5)
started = time.monotonic()
for fd in fillers:
    os.close(fd)
answer = client.recv(100)
print(json.dumps({"seen": seen, "answer": answer[:15].decode(),
                  "waited": time.monotonic() - started}))
client.close()
server.close()
"""


@pytest.mark.server
def test_server_survives_emfile_at_accept():
    """The process out of descriptors: asyncio's accept loop complains (one line, no
    traceback) and accepts again a second later, once descriptors are free."""
    out = subprocess.run([sys.executable, "-c", EMFILE_SCRIPT], capture_output=True,
                         text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["seen"] and result["answer"] == "HTTP/1.1 200 OK", (result, out.stderr)
    assert result["waited"] < 3.0
    assert "Traceback" not in out.stderr
    assert "metrics server: socket.accept() out of system resource: OSError: [Errno 24]" \
        in out.stderr


# -- a live daemon under a low descriptor limit --------------------------------------------


@pytest.fixture(scope="module")
def primary(tmp_path_factory):
    server = module_primary(tmp_path_factory, "hostile-primary", "CREATE DATABASE h",
                            "CREATE TABLE h.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)",
                            semi_sync_timeout_ms=5000)
    yield server
    server.stop(remove=True)


class Live:
    """The daemon, its port, and what it looked like before any attack."""

    def __init__(self, primary, directory, daemon, port, archive):
        self.primary, self.directory, self.daemon, self.port = (primary, directory, daemon,
                                                                port)
        self.pid = daemon.proc.pid
        self.store = ArchiveStore(f"file://{archive}", {})
        self.fds = self.rss = None

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def nofile(self):
        """[soft, hard] of its descriptor limit."""
        with open(f"/proc/{self.pid}/limits") as f:
            return next(line.split()[3:5] for line in f if line.startswith("Max open files"))

    def rss_kb(self):
        with open(f"/proc/{self.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.fixture(scope="module")
def live(primary, tmp_path_factory):
    _enough_descriptors_here(IDLE + BURST + 100)
    tmp = tmp_path_factory.mktemp("hostile")
    port = free_port()
    daemon = Daemon(primary, tmp / "d", "--metrics-address", f"127.0.0.1:{port}",
                    "--archive", f"file://{tmp / 'archive'}", "--source-name", "db1",
                    "--archive-interval", "0.3", server_id=4712)
    daemon.args = ["prlimit", f"--nofile={NOFILE}:{NOFILE}", "--", *daemon.args]
    daemon.start()
    try:
        state = Live(primary, tmp / "d", daemon, port, tmp / "archive")
        wait_for(lambda: state.nofile() == [str(NOFILE)] * 2, 10, 0.01,
                 what="prlimit to set the limit and exec the daemon itself")
        wait_for(lambda: caught_up(primary, tmp / "d"), what="the first catch-up")
        wait_for(lambda: _get(port, 1.0)[0] == 200, what="the metrics endpoint")
        _progress(state, 5)
        state.fds, state.rss = state.fd_count(), state.rss_kb()
        yield state
    finally:
        code = daemon.stop()
    assert code == 0, daemon.output()


def _enough_descriptors_here(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def _get(port, timeout):
    """(status, body) of GET /metrics; (None, the error's name) when there is none."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                    timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return None, type(e).__name__


def _progress(live, n):
    """``n`` transactions on the primary, then checkpointed where the primary is (durable
    and acknowledged) and archived to its end; no scrape needed (one may be refused)."""
    live.primary.execute(*[f"INSERT INTO h.t (v) VALUES (REPEAT('y', {100 + i}))"
                           for i in range(n)])
    end = (current_binlog(live.primary), int(live.primary.execute("SHOW MASTER STATUS")[0][1]))
    def checkpointed():
        state = load_state(str(live.directory))
        return (state.file, state.pos) == end
    wait_for(checkpointed, 20, what=f"the checkpoint at {end}")
    wait_archived_to_the_end(live.primary, live.store, timeout=20)


def _healthy(live, attack):
    """After an attack: a scrape within a second, the backup moving, descriptors and
    memory back, nothing alarming in the log."""
    assert live.daemon.proc.poll() is None, live.daemon.output()
    started = time.monotonic()
    assert _get(live.port, 1.0)[0] == 200, attack
    assert time.monotonic() - started < 1.0
    _progress(live, 10)
    wait_for(lambda: live.fd_count() <= live.fds + 1, 10, what=f"descriptors back ({attack})")
    assert live.rss_kb() < live.rss + RSS_SLACK_KB, (attack, live.rss, live.rss_kb())
    log = live.daemon.output()
    for bad in ("Traceback", "Too many open files", "out of system resource"):
        assert bad not in log, (attack, log[-3000:])
    return live.fd_count(), live.rss_kb()


def _report(attack, live, peak=None):
    """``_healthy``, then the figures (shown with pytest -s)."""
    fds, rss = _healthy(live, attack)
    print(f"\n{attack}: descriptors {live.fds} before, {peak or '-'} at most, {fds} after; "
          f"VmRSS {live.rss} kB before, {rss} kB after")


class PeakFds:
    """The daemon's highest descriptor count while the block runs (sampled by a thread)."""

    def __init__(self, live):
        self.live, self.peak, self.done = live, live.fd_count(), threading.Event()

    def __enter__(self):
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        return self

    def _watch(self):
        while not self.done.wait(0.002):
            self.peak = max(self.peak, self.live.fd_count())

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()


def test_idle_connections_by_the_hundred(live):
    held = []
    try:
        with PeakFds(live) as fds:
            held = [connect(live.port) for _ in range(IDLE)]
            started = time.monotonic()
            # the cap is full of idle clients: a quick 503 (the over-cap ones queued
            # before it are answered first, on a loaded machine too)
            status, _ = _get(live.port, 3.0)
            took = time.monotonic() - started
            assert status in (200, 503) and took < 3.0, (status, took)
            _progress(live, 10)  # the backup goes on under the attack
            wait_for(lambda: _get(live.port, 1.0)[0] == 200, DEADLINE + 5,
                     what="a scrape once the idle clients are cut off")
            started = time.monotonic()
            assert _get(live.port, 1.0)[0] == 200  # the idle ones still held on their side
            print(f"\n{IDLE} idle held: a scrape got {status} in {took * 1000:.1f} ms; "
                  f"once they were cut off, 200 in {(time.monotonic() - started) * 1000:.1f} ms")
        assert fds.peak <= live.fds + SERVER_FDS, (live.fds, fds.peak)
    finally:
        for sock in held:
            sock.close()
    _report("idle", live, fds.peak)


def _tls_hello():
    """The first bytes of a client that speaks TLS to a plain-HTTP port."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="x")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_slow_clients_are_cut_off_at_the_deadline(live):
    socks, cut = [], set()
    try:
        socks = [connect(live.port) for _ in range(CAP // 2)]
        socks[0].sendall(_tls_hello())  # never followed by a blank line
        started = time.monotonic()
        for tick in range(int(DEADLINE) + 5):  # one byte a second from each
            cut |= {i for i, sock in enumerate(socks)
                    if i not in cut and _drip(sock, GET[tick:tick + 1])}
            if len(cut) == len(socks):
                break
            assert _get(live.port, 1.0)[0] == 200  # fewer than the cap: scrapes work
            _wait_readable([sock for i, sock in enumerate(socks) if i not in cut], 1.0)
        took = time.monotonic() - started
        assert len(cut) == len(socks) and DEADLINE - 1 < took < DEADLINE + 3, (len(cut), took)
    finally:
        for sock in socks:
            sock.close()
    print(f"\nslow clients cut after {took:.1f} s")
    _report("slow", live)


def _drip(sock, byte):
    """Send one byte; True when the server has closed the connection."""
    try:
        sock.sendall(byte)
        sock.setblocking(False)
        try:
            return sock.recv(1024) == b""
        except BlockingIOError:
            return False
        finally:
            sock.setblocking(True)
    except (BrokenPipeError, ConnectionResetError):
        return True


def _wait_readable(socks, seconds):
    select.select(socks, [], [], seconds)  # a close by the server ends the wait early


def test_oversized_request_heads(live):
    pads = [b"GET /metrics HTTP/1.1\r\n" + b"".join(
                b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(100)) + b"\r\n",
            b"GET /metrics HTTP/1.1\r\nX-Big: " + b"b" * 100_000 + b"\r\n\r\n",
            b"GET /" + b"u" * 100_000 + b" HTTP/1.1\r\n\r\n"]
    for data in pads:
        started = time.monotonic()
        answer, _ = exchange(live.port, data)
        assert status_of(answer) == 431 and time.monotonic() - started < 1.0, answer[:100]
    _report("oversized", live)


def test_garbage(live):
    cases = [os.urandom(20_000), b"\x00" * 100 + b"\r\n\r\n",
             b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(500) + b"\r\n\r\n",
             b"GET /metrics HTTP/2.0\r\n\r\n", b"GET\r\n\r\n", b"\r\n\r\n",
             b"GET /metrics HTTP/1.1\r\n" + b"\xff" * 50 + b"\r\n\r\n"]
    for data in cases:
        started = time.monotonic()
        answer, _ = exchange(live.port, data)
        assert status_of(answer) in (200, 400, 431) and time.monotonic() - started < 1.0, (
            data[:40], answer[:100])
    with connect(live.port) as sock:  # half a request, then the client's FIN
        sock.sendall(b"GET /met")
        sock.shutdown(socket.SHUT_WR)
        assert read_to_end(sock)[0] == b""
    _report("garbage", live)


def test_burst_of_parallel_connects(live):
    barrier = threading.Barrier(BURST)

    def one(_):
        barrier.wait(10)
        try:
            return status_of(exchange(live.port, GET, timeout=10)[0])
        except OSError as e:
            return type(e).__name__

    with PeakFds(live) as fds, ThreadPoolExecutor(BURST) as pool:
        started = time.monotonic()
        results = list(pool.map(one, range(BURST)))
        took = time.monotonic() - started
    tally = {r: results.count(r) for r in set(results)}
    assert set(tally) <= {200, 503} and tally.get(200), tally
    assert fds.peak <= live.fds + SERVER_FDS, (live.fds, fds.peak)
    print(f"\nburst of {BURST}: {tally} in {took:.2f} s")
    _report("burst", live, fds.peak)
