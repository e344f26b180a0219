"""serve's parts alone (pure, no server): the registry's bookkeeping, the listener's
choice of the handshake to end for a new one, and the one auth switch of either
flavor's login."""

import socket
import struct
import threading
import time

from replay.serve.protocol import mysql as my
from replay.serve.protocol import packets as pk
from replay.serve.connection import Connection
from replay.serve.protocol.limits import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS
from replay.serve.listener import _evict_for
from replay.serve.registry import Registry
from tests.serve import rawclient as rc


class FakeConn:
    def __init__(self, conn_id, address="127.0.0.1", tls=None):
        self.id, self.peer, self.tls, self.closed = conn_id, (address, 1), tls, False

    def close(self):
        self.closed = True


def admit(registry, address="127.0.0.1", capacity=100, choose=lambda handshakes: None):
    return registry.admit(lambda conn_id: FakeConn(conn_id, address), capacity, choose)


def test_admit_counts_ids_until_full_and_refuses_all_once_closed():
    registry = Registry(max_connections=2)
    first, second = admit(registry, capacity=2), admit(registry, capacity=2)
    assert (first.conn.id, second.conn.id) == (1, 2)
    full = admit(registry, capacity=2)
    assert (full.conn, full.evicted, full.closed) == (None, None, False)
    assert registry.close() == [first.conn, second.conn]
    assert admit(registry).closed
    assert registry.snapshot().connections == 2


def test_a_victim_leaves_the_handshakes_but_stays_open_until_it_ends():
    registry = Registry(max_connections=2)
    old = admit(registry).conn
    new = admit(registry, choose=lambda handshakes: handshakes[0])
    assert new.evicted is old
    now = registry.snapshot()
    assert (now.connections, now.handshaking) == (2, 1)
    registry.forget(old)
    assert registry.snapshot().connections == 1


def test_logins_past_max_connections_are_refused_and_counted():
    registry = Registry(max_connections=1)
    a, b = admit(registry).conn, admit(registry).conn
    assert registry.logged_in(a) and not registry.logged_in(b)
    now = registry.snapshot()
    assert (now.handshaking, now.stats) == (0, {"refused_connections": 1})


def test_a_new_dump_of_a_server_id_ends_the_older_one():
    registry = Registry(max_connections=4)
    a, b = admit(registry).conn, admit(registry).conn
    b.tls = "TLSv1.3"
    registry.dump_started(a, 7)
    registry.dump_started(b, 7)
    assert a.closed and not b.closed
    registry.dump_failed(1236, "gone")
    now = registry.snapshot()
    assert (now.dumping, now.dumps_started, now.dump_tls, now.errors) == (
        1, 2, (None, "TLSv1.3"), ((1236, "gone"),))
    registry.forget(b)
    assert registry.snapshot().dumping == 0


def test_wait_end_waits_for_the_first_end():
    registry = Registry(max_connections=1)
    assert registry.wait_end(0.01) is None
    threading.Timer(0.05, registry.dump_ended, ["end"]).start()
    started = time.monotonic()
    assert registry.wait_end(5) == "end" and time.monotonic() - started < 4


def test_caching_sha2_remembers_users_and_failures_count():
    registry = Registry(max_connections=1)
    assert not registry.sha2_cached("u")
    registry.sha2_remember("u")
    assert registry.sha2_cached("u")
    registry.login_failed("10.0.0.1")
    registry.count("timed_out")
    assert registry.snapshot().stats == {"refused_logins": 1, "timed_out": 1}


def test_eviction_ends_an_address_own_oldest_then_the_busiest_address_oldest():
    mine = [FakeConn(i, "10.0.0.1") for i in range(MAX_HANDSHAKES_PER_ADDRESS)]
    assert _evict_for(mine, "10.0.0.1") is mine[0]
    assert _evict_for(mine, "10.0.0.2") is None
    crowd = [FakeConn(i, f"10.0.1.{i % 3}") for i in range(MAX_HANDSHAKES)]
    assert _evict_for(crowd, "10.0.2.1") is crowd[0]  # 10.0.1.0 holds the most


def response(plugin, token):
    head = struct.pack("<IIB23x", rc.CAPS, 1 << 24, pk.CHARSET_LATIN1)
    return head + b"u\0" + bytes([len(token)]) + token + plugin.encode() + b"\0"


def login_answer(plugin, mysql, switched_token=b"t2"):
    """(LoginAnswer, the auth switch request the client got or None) of a
    HandshakeResponse naming ``plugin`` (sequence id 1)."""
    ours, theirs = socket.socketpair()
    theirs.settimeout(5)
    conn = Connection(None, None, None, ours, ("127.0.0.1", 1), 1)
    scramble = b"s" * 20
    try:
        payload = response(plugin, b"t1")
        if plugin and plugin not in ((my.CACHING_SHA2, pk.NATIVE_PASSWORD) if mysql
                                     else (pk.NATIVE_PASSWORD,)):
            rc.send_packet(theirs, switched_token, 3)  # the client's answer to the switch
        answer = conn._login_answer(payload, 1, scramble, time.monotonic() + 5, mysql)
        theirs.setblocking(False)
        try:
            switch = rc.read_packet(theirs)
        except BlockingIOError:
            switch = None
        return answer, switch
    finally:
        ours.close()
        theirs.close()


def test_mariadb_switches_any_other_plugin_to_native_password():
    answer, switch = login_answer(pk.NATIVE_PASSWORD, False)
    assert (answer.plugin, answer.token, answer.seq, switch) == (
        pk.NATIVE_PASSWORD, b"t1", 2, None)
    answer, switch = login_answer("", False)
    assert (answer.plugin, answer.token, switch) == (pk.NATIVE_PASSWORD, b"t1", None)
    answer, switch = login_answer(my.CACHING_SHA2, False)
    assert switch == (2, pk.auth_switch_request(b"s" * 20))
    assert (answer.plugin, answer.token, answer.seq) == (pk.NATIVE_PASSWORD, b"t2", 4)


def test_mysql_takes_caching_sha2_or_native_and_switches_the_others_to_caching_sha2():
    for plugin, taken in ((my.CACHING_SHA2, my.CACHING_SHA2), ("", my.CACHING_SHA2),
                          (pk.NATIVE_PASSWORD, pk.NATIVE_PASSWORD)):
        answer, switch = login_answer(plugin, True)
        assert (answer.plugin, answer.token, answer.seq, switch) == (taken, b"t1", 2, None)
    answer, switch = login_answer("sha256_password", True)
    assert switch == (2, my.auth_switch_request(my.CACHING_SHA2, b"s" * 20))
    assert (answer.plugin, answer.token, answer.seq) == (my.CACHING_SHA2, b"t2", 4)
