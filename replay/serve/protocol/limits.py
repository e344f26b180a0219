"""The bounds of ``mysqlbackup serve`` against hostile and careless clients (pure: no
sockets; clocks are passed in so that tests drive them).

* ``LoginThrottle``: failed logins counted per client address; past a few, every
  login from that address waits a growing delay before it is answered (as MySQL's
  connection_control plugin does: a success waits too, so that the delay cannot be
  read as an answer), forgotten after a quiet while; the table is bounded.
* ``LogLimiter``: one log line per kind of refusal per interval, with the count of
  those left out, so that a flood of bad clients cannot flood the log.
* ``LikePattern``: SQL ``LIKE`` (``%``, ``_``, ``\\`` escapes) without a regex that
  can backtrack on a client's pattern.
"""

import ipaddress
import re
from collections import OrderedDict

# connections: MariaDB's connect_timeout is 10 s (the whole handshake); a logged-in
# client that sends no whole command for this long is closed (a replica sends its
# set-up queries back to back, then dumps)
HANDSHAKE_TIMEOUT = 10.0
COMMAND_TIMEOUT = 60.0
MAX_CONNECTIONS = 64        # logged-in connections (--max-connections)
MAX_HANDSHAKES = 32         # connections not logged in yet; a new one ends the oldest ...
MAX_HANDSHAKES_PER_ADDRESS = 8  # ... of its own address past this many, else of the busiest

# failed logins, per client address
FREE_FAILURES = 3           # answered at once
FIRST_DELAY = 0.5           # then this, doubled at each failure ...
MAX_DELAY = 8.0             # ... up to this
FORGET_AFTER = 600.0        # an address with no failure for this long starts afresh
MAX_ADDRESSES = 4096        # addresses remembered (the oldest forgotten first)


def throttle_key(address):
    """What failed logins are counted by: the IPv4 address, an IPv6 address's /64 (one
    host holds a whole /64)."""
    if ":" not in address:
        return address
    try:
        return str(ipaddress.ip_network(f"{address.split('%')[0]}/64", strict=False))
    except ValueError:
        return address


class LoginThrottle:
    """Failed logins per address and the delay each next login from it waits."""

    def __init__(self, clock):
        self.clock = clock
        self._failures = OrderedDict()   # address -> (count, time of the last failure)

    def delay(self, address):
        """Seconds a login from ``address`` waits before it is checked and answered."""
        count = self._count(address)
        if count < FREE_FAILURES:
            return 0.0
        return min(MAX_DELAY, FIRST_DELAY * 2 ** (count - FREE_FAILURES))

    def failed(self, address):
        """Count one more failed login from ``address``."""
        count = self._count(address) + 1
        self._failures.pop(address, None)
        self._failures[address] = (count, self.clock())
        while len(self._failures) > MAX_ADDRESSES:
            self._failures.popitem(last=False)

    def succeeded(self, address):
        """A login from ``address`` succeeded: its failures are forgotten."""
        self._failures.pop(address, None)

    def _count(self, address):
        entry = self._failures.get(address)
        if entry is None:
            return 0
        if self.clock() - entry[1] > FORGET_AFTER:
            del self._failures[address]
            return 0
        return entry[0]


class LogLimiter:
    """Whether a line of a kind is logged now: the first at once, then at most one per
    ``interval`` seconds, each saying how many were left out since."""

    def __init__(self, clock, interval=10.0):
        self.clock, self.interval = clock, interval
        self._last, self._left_out = {}, {}

    def allow(self, kind):
        """(True, how many of ``kind`` were left out before this one) when a line is due,
        else (False, 0) and the line is counted as left out."""
        now = self.clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            self._left_out[kind] = self._left_out.get(kind, 0) + 1
            return False, 0
        self._last[kind] = now
        return True, self._left_out.pop(kind, 0)


_MANY, _ONE = object(), object()   # the wildcards of a LIKE pattern
MAX_NAME = 64                       # a variable name is at most this long


class LikePattern:
    """A SQL LIKE pattern (``%``, ``_``, ``\\`` escapes), read once: ``match(text)`` is
    O(len(pattern) * len(text)) at worst, however many ``%`` it holds (one backtracking
    point, the last ``%``). A pattern with more characters to match than a variable
    name can hold matches nothing (read no further: a 1 MiB pattern costs one pass)."""

    def __init__(self, pattern):
        # runs of 3+ '%' kept as 2 (linear, no backtracking): '\\%%' stays a literal '%'
        # and a wildcard, and the pattern left is at most about 3 times its other chars
        collapsed = re.sub(r"%{3,}", "%%", pattern.lower())
        if len(collapsed) - collapsed.count("%") > 2 * MAX_NAME:  # an escape is 2
            self.tokens = None
        else:
            self.tokens = _like_tokens(collapsed)

    def match(self, text):
        """True when ``text`` (case-insensitive) matches the pattern."""
        tokens, text = self.tokens, text.lower()
        if tokens is None:
            return False
        t = p = 0
        star_p, star_t = -1, 0
        while t < len(text):
            token = tokens[p] if p < len(tokens) else None
            if token is _MANY:
                star_p, star_t, p = p, t, p + 1
            elif token is not None and (token is _ONE or token == text[t]):
                t, p = t + 1, p + 1
            elif star_p >= 0:
                star_t += 1
                t, p = star_t, star_p + 1
            else:
                return False
        return all(token is _MANY for token in tokens[p:])


def like_match(pattern, text):
    """True when ``text`` matches the SQL LIKE ``pattern`` (see LikePattern)."""
    return LikePattern(pattern).match(text)


def _like_tokens(pattern):
    """The pattern as a list: _MANY for a run of ``%``, _ONE for ``_``, else one
    literal character (``\\%`` and ``\\_`` are literals)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1])
            i += 2
        elif ch == "%":
            if not out or out[-1] is not _MANY:
                out.append(_MANY)
            i += 1
        else:
            out.append(_ONE if ch == "_" else ch)
            i += 1
    return out
