"""``mysqlbackup stream --metrics-address``: the Prometheus endpoint of a real daemon
process, scraped during and after traffic on a throwaway MariaDB primary, with a
file:// archive; a port already in use fails at start-up with one line."""

import os
import socket
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import UsageError
from mysqlbackup.httpd import parse_address
from mysqlbackup.sandbox import free_port
from mysqlbackup.stream.metrics import NULL_METRICS, StreamMetrics
from tests.helpers import Daemon, caught_up, current_binlog, module_primary, read, run_cli, wait_for

SERVER_ID = 4711


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = module_primary(tmp_path_factory, "metrics-primary", "CREATE DATABASE m",
                            "CREATE TABLE m.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)",
                            semi_sync_timeout_ms=5000)
    yield server
    server.stop(remove=True)


def scrape(port):
    """{(name, sorted labels): value} of one scrape, parsed by prometheus_client."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def labels_of(samples, name):
    """The labels of the one sample called ``name`` (an info metric)."""
    found = [dict(labels) for (n, labels) in samples if n == name]
    assert len(found) == 1, (name, found)
    return found[0]


def insert(server, n):
    server.execute(*[f"INSERT INTO m.t (v) VALUES (REPEAT('x', {100 + i % 50}))"
                     for i in range(n)])


def events_between(path, start):
    """How many events the server's binlog file holds after offset ``start``."""
    return sum(1 for _ in iter_events(read(path), start, None))


def dump_thread(server):
    rows = server.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND "
                          "LIKE 'Binlog Dump%' AND USER = 'repl'")
    return rows[0][0] if len(rows) == 1 else None


@pytest.mark.server
def test_metrics_move_with_traffic_archive_and_reconnect(server, tmp_path):
    port = free_port()
    archive = tmp_path / "archive"
    daemon = Daemon(server, tmp_path / "d", "--metrics-address", f"127.0.0.1:{port}",
                    "--archive", f"file://{archive}", "--source-name", "db1",
                    "--archive-interval", "0.3", server_id=SERVER_ID).start()
    try:
        wait_for(lambda: caught_up(server, tmp_path / "d"), what="the first catch-up")
        wait_for(lambda: _scrape_or_none(port), what="the metrics endpoint")
        _check_traffic(server, port, tmp_path / "d")
        _check_caught_up(server, port)
        _check_archive(port)
        _check_reconnect(server, port, tmp_path / "d")
    finally:
        assert daemon.stop() == 0, daemon.output()


def _scrape_or_none(port):
    try:
        return scrape(port)
    except OSError:
        return None


def _check_traffic(server, port, directory):
    """Counters move by what the traffic sent: transactions exactly, bytes and events
    by the binlog's own growth (plus framing and heartbeats)."""
    name = current_binlog(server)
    start = os.path.getsize(server.binlog_path(name))
    committed, during = 200, []
    before = scrape(port)
    writer = threading.Thread(target=lambda: [insert(server, 20) for _ in range(10)])
    started = time.monotonic()
    writer.start()
    while writer.is_alive():
        during.append(scrape(port))
        time.sleep(0.05)
    writer.join()
    wait_for(lambda: caught_up(server, directory), what="the catch-up after the traffic")
    trx = "mysqlbackup_durable_transactions_total"
    want = value(before, trx) + committed
    after = wait_for(lambda: (s := scrape(port)) and value(s, trx) == want and s,
                     what=f"{want} durable transactions")
    elapsed = time.monotonic() - started
    assert current_binlog(server) == name
    grown = os.path.getsize(server.binlog_path(name)) - start
    events = events_between(server.binlog_path(name), start)
    got_bytes = value(after, "mysqlbackup_received_bytes_total") - value(
        before, "mysqlbackup_received_bytes_total")
    got_events = value(after, "mysqlbackup_received_events_total") - value(
        before, "mysqlbackup_received_events_total")
    heartbeats = elapsed / 1.0 + 5  # at most one a second while idle (--heartbeat 1)
    assert events <= got_events <= events + heartbeats, (events, got_events)
    # each event: 4 bytes of packet header, the OK byte and 2 of semi-sync; a heartbeat ~60
    assert grown + 7 * events <= got_bytes <= grown + 7 * events + 100 * heartbeats
    series = [value(s, trx) for s in during]
    assert series == sorted(series), "a counter went down"
    assert len(set(series)) > 1, "no scrape saw the traffic under way"
    # durable bytes wait up to --archive-interval for the archiver's next pass
    assert any(value(s, "mysqlbackup_archive_backlog_bytes") > 0 for s in during)
    for histogram in ("mysqlbackup_fsync_duration_seconds", "mysqlbackup_ack_latency_seconds"):
        count = value(after, histogram + "_count") - (value(before, histogram + "_count") or 0)
        assert count > 0, histogram
        assert 0 < value(after, histogram + "_sum") / value(after, histogram + "_count") < 1.0
    assert value(after, "mysqlbackup_ack_latency_seconds_count") >= committed / 20


def _check_caught_up(server, port):
    """Idle and caught up: 0 s behind (a heartbeat came after the newest event), and the
    durable position is the server's own."""
    wait_for(lambda: value(scrape(port), "mysqlbackup_seconds_behind_source") == 0,
             timeout=10, what="0 seconds behind when caught up")
    samples = scrape(port)
    info = labels_of(samples, "mysqlbackup_durable_position_info")
    name = current_binlog(server)
    assert info == {"file": name, "gtid": server.execute("SELECT @@gtid_binlog_pos")[0][0],
                    "position": str(os.path.getsize(server.binlog_path(name)))}
    assert value(samples, "mysqlbackup_durable_offset_bytes") == int(info["position"])


def _check_archive(port):
    def archived():
        s = scrape(port)
        return (value(s, "mysqlbackup_archive_backlog_files") == 0
                and value(s, "mysqlbackup_archive_backlog_bytes") == 0 and s)
    samples = wait_for(archived, timeout=20, what="an empty archive backlog")
    assert value(samples, "mysqlbackup_archive_seconds_since_last_success") < 5
    assert abs(value(samples, "mysqlbackup_archive_last_success_timestamp_seconds")
               - time.time()) < 5


def _check_reconnect(server, port, directory):
    """KILL of the daemon's dump thread: one more reconnect, a ConnectionLost counted,
    and the transactions after it counted durable once each."""
    before = scrape(port)
    lost = value(before, "mysqlbackup_errors_total", stage="stream",
                 kind="ConnectionLost") or 0
    server.execute(f"KILL {dump_thread(server)}")
    after = wait_for(lambda: (s := scrape(port)) and value(
        s, "mysqlbackup_reconnects_total") > value(before, "mysqlbackup_reconnects_total") and s,
        what="a reconnect")
    assert value(after, "mysqlbackup_errors_total", stage="stream",
                 kind="ConnectionLost") == lost + 1
    wait_for(lambda: dump_thread(server), what="the new dump thread")
    insert(server, 10)
    trx = "mysqlbackup_durable_transactions_total"
    wait_for(lambda: caught_up(server, directory), what="the catch-up after the reconnect")
    wait_for(lambda: value(scrape(port), trx) == value(before, trx) + 10,
             what="10 more durable transactions")


@pytest.mark.server
def test_metrics_port_in_use_fails_at_start_with_one_line(tmp_path):
    """Nothing else happens first: no connection to the (unreachable) source."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        address = f"127.0.0.1:{held.getsockname()[1]}"
        out = run_cli("stream", "--source", "mysql://repl@127.0.0.1:1", "--server-id", "5",
                      "--dir", str(tmp_path / "d"), "--metrics-address", address)
    assert out.returncode == 2, out
    assert out.stderr.splitlines() == [
        f"mysqlbackup: error: cannot serve metrics on {address}: address already in use"]


def test_metrics_address_parsing_and_registries_of_their_own():
    assert parse_address("127.0.0.1:9104") == ("127.0.0.1", 9104)
    assert parse_address("[::1]:9104") == ("::1", 9104)
    assert parse_address(":9104") == ("0.0.0.0", 9104)
    for bad in ("9104", "host:", "host:port", "h:70000"):
        with pytest.raises(UsageError, match="bad --metrics-address"):
            parse_address(bad)
    one, two = StreamMetrics(), StreamMetrics()  # two daemons in one process: no clash
    one.durable(3)
    assert one.registry.get_sample_value("mysqlbackup_durable_transactions_total") == 3
    assert two.registry.get_sample_value("mysqlbackup_durable_transactions_total") == 0
    assert NULL_METRICS.enabled is False and NULL_METRICS.durable(3) is None


@pytest.mark.server
def test_the_recovery_window_gauges_follow_the_archive(server, tmp_path):
    """The window's two ends, the newest base and the holes, read from the archive's
    indexes: absent before a base, then moving with each commit archived."""
    port, url = free_port(), f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "d", "--metrics-address", f"127.0.0.1:{port}",
                    "--archive", url, "--source-name", "db1", "--archive-interval", "0.3",
                    "--window-interval", "0", server_id=SERVER_ID + 1).start()
    holes = "mysqlbackup_archive_holes"
    try:
        first = wait_for(lambda: (s := _scrape_or_none(port)) and
                         value(s, holes, source="db1") is not None and s,
                         what="the recovery window metrics")
        assert value(first, "mysqlbackup_restorable_last_timestamp_seconds",
                     source="db1") is None  # no base: no window
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{server.port}",
                       "--archive", url, "--source-name", "db1", password="", timeout=120)
        assert base.returncode == 0, base.stderr
        ends = []
        for ahead in (100, 200):  # commits stamped ahead: the window's end is exactly them
            stamp = int(time.time()) + ahead
            server.execute(f"SET TIMESTAMP = {stamp}",
                           "INSERT INTO m.t (v) VALUES ('window')")
            moved = wait_for(lambda: (s := scrape(port)) and value(
                s, "mysqlbackup_restorable_last_timestamp_seconds", source="db1") == stamp
                and s, what=f"the window's end to reach {stamp}")
            ends.append(stamp)
            assert value(moved, holes, source="db1") == 0
            start = value(moved, "mysqlbackup_restorable_first_timestamp_seconds",
                          source="db1")
            newest = value(moved, "mysqlbackup_base_newest_timestamp_seconds", source="db1")
            assert start == newest and time.time() - 120 < newest <= time.time()
            assert 0 <= value(moved, "mysqlbackup_recovery_window_age_seconds",
                              source="db1") < 60
        assert ends[1] > ends[0]
    finally:
        assert daemon.stop() == 0, daemon.output()
