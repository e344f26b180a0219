"""serve's parsers and policies on hostile input, without a server: property tests
(hypothesis, a bounded number of examples) that every packet parser either parses
or raises MalformedPacket, every query gets an answer (never an exception), LIKE
matches as the server's LIKE does, and the throttle, log limiter and URL masking
stay within their bounds."""

import re
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mysqlbackup.errors import mask_url
from replay.serve.protocol import packets as pk
from replay.serve.protocol.limits import (FIRST_DELAY, FORGET_AFTER, FREE_FAILURES, MAX_ADDRESSES,
                                 MAX_DELAY, LoginThrottle, LogLimiter, like_match)
from replay.serve.protocol.queries import ServerFacts, Session, answer

FUZZ = settings(max_examples=400, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])
FACTS = ServerFacts(server_id=1, version="5.5.5-10.11.19-MariaDB-log", checksum="CRC32",
                    gtid_binlog_pos="0-1-12", gtid_pos_at=lambda file, pos: None)


def handshake_like():
    """Bytes shaped like a HandshakeResponse41 (so the fuzz reaches past the first
    check), or anything."""
    head = st.builds(lambda caps, rest: caps.to_bytes(4, "little") + rest,
                     st.integers(0, 2**32 - 1) | st.just(pk.CLIENT_PROTOCOL_41
                                                         | pk.CLIENT_PLUGIN_AUTH_LENENC
                                                         | pk.CLIENT_PLUGIN_AUTH
                                                         | pk.CLIENT_CONNECT_WITH_DB),
                     st.binary(max_size=120))
    return head | st.binary(max_size=200)


@FUZZ
@given(handshake_like())
def test_handshake_response_parses_or_is_malformed(payload):
    try:
        response = pk.parse_handshake_response(payload)
    except pk.MalformedPacket:
        return
    assert len(response.auth) <= pk.MAX_AUTH_BYTES
    assert isinstance(response.user, str)


@FUZZ
@given(st.binary(max_size=64))
def test_command_payloads_parse_or_are_malformed(payload):
    for parse in (pk.parse_binlog_dump, pk.parse_register_slave):
        try:
            parse(b"\x12" + payload)
        except pk.MalformedPacket:
            pass
    pk.is_ssl_request(payload)


STATEMENTS = st.sampled_from([
    "SET @master_heartbeat_period=", "SET @slave_connect_state=", "SET @mariadb_slave_capability=",
    "SET @master_binlog_checksum=", "SHOW VARIABLES LIKE ", "SELECT @@", "SELECT @",
    "SELECT binlog_gtid_pos(", "SET ", "SELECT ", ""])


@FUZZ
@given(STATEMENTS, st.text(max_size=80))
def test_every_query_gets_an_answer(prefix, rest):
    session = Session()
    reply = answer(prefix + rest, session, FACTS, now=1)
    assert reply.kind in ("ok", "rows", "error")
    assert all(isinstance(p, bytes) for p in reply.payloads())
    assert session.heartbeat_ns == 0 or 10**6 <= session.heartbeat_ns <= 4_294_967 * 10**9


def reference_like(pattern, text):
    """LIKE by a regex: fine for the short patterns of the test, not for a client's."""
    out, i = "", 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out += re.escape(pattern[i + 1])
            i += 2
            continue
        out += ".*" if ch == "%" else "." if ch == "_" else re.escape(ch)
        i += 1
    return re.fullmatch(out, text, re.IGNORECASE | re.DOTALL) is not None


@FUZZ
@given(st.text(alphabet="%_ab\\", max_size=12), st.text(alphabet="ab_%\\", max_size=10))
def test_like_matches_as_the_servers_like(pattern, text):
    assert like_match(pattern, text) == reference_like(pattern, text)


@pytest.mark.parametrize("pattern, text", [("a\\%%", "a%bc"), ("a\\%%%%", "a%"),
                                           ("a\\%", "a%b"), ("%" * 9 + "_", "")])
def test_like_escapes_next_to_runs_of_wildcards(pattern, text):
    assert like_match(pattern, text) == reference_like(pattern, text)


@pytest.mark.parametrize("pattern", ["%" * 100000 + "X", "%a" * 50000 + "X", "_%" * 50000,
                                     "a" * (1 << 20), "\\%" * 50000 + "%" * 500000])
def test_like_is_linear_in_the_pattern(pattern):
    started = time.monotonic()
    like_match(pattern, "gtid_binlog_pos_and_more_letters_abcdefgh")
    assert time.monotonic() - started < 1.0   # a backtracking regex takes minutes


@pytest.mark.parametrize("text", ["a" * 1_000_000, "a://" * 250_000, "x." * 500_000,
                                  ("a://" + "b" * 1000) * 1000])
def test_mask_url_is_linear(text):
    started = time.monotonic()
    mask_url(text)
    assert time.monotonic() - started < 1.0   # was 14 minutes for a 1 MB user name


def test_mask_url_still_masks():
    assert mask_url("s3://KEY:SECRET@bucket/x and mysql://u:pw@h:3306/") == \
        "s3://***@bucket/x and mysql://u:***@h:3306/"
    assert mask_url("user 'aaaa' from xs3://k@b") == "user 'aaaa' from xs3://***@b"


def test_throttle_grows_forgets_and_is_bounded():
    now = [0.0]
    throttle = LoginThrottle(lambda: now[0])
    for _ in range(FREE_FAILURES):
        assert throttle.delay("a") == 0
        throttle.failed("a")
    delays = []
    for _ in range(8):
        delays.append(throttle.delay("a"))
        throttle.failed("a")
    assert delays[:3] == [FIRST_DELAY, 2 * FIRST_DELAY, 4 * FIRST_DELAY]
    assert max(delays) == MAX_DELAY
    assert throttle.delay("b") == 0          # per address
    now[0] += FORGET_AFTER + 1
    assert throttle.delay("a") == 0          # a quiet while forgives
    for i in range(MAX_ADDRESSES + 10):
        throttle.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(throttle._failures) == MAX_ADDRESSES
    throttle.failed("a")
    throttle.succeeded("a")
    assert throttle.delay("a") == 0


def test_log_limiter_counts_what_it_leaves_out():
    now = [0.0]
    limiter = LogLimiter(lambda: now[0], interval=10)
    assert limiter.allow("x") == (True, 0)
    assert [limiter.allow("x") for _ in range(3)] == [(False, 0)] * 3
    assert limiter.allow("y") == (True, 0)
    now[0] = 10.5
    assert limiter.allow("x") == (True, 3)
