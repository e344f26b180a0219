"""GTID sets of both flavors: pure parsing, formatting and bookkeeping.

* MariaDB: a position per replication domain, ``domain-server_id-seq_no``
  (``0-1-42,1-7-3``): the last transaction of each domain.
* MySQL: ``uuid:interval[:interval...]`` per source (``3E11FA47-...:1-5:7``), tagged
  GTIDs of MySQL 8.4+ after their tag (``3E11FA47-...:1-5:nightly:1-2``).

Both classes offer ``add``, ``contains``, ``covers`` (every transaction of another
state of the flavor), ``copy``, ``is_empty`` and ``str()``; MySQL's sets ``subtract``
too. ``covers(outer, inner)`` is the one containment of two states, either flavor:
the archive's window, serve's purged check and the native apply's end all ask it.
"""

import re

from mysqlbackup.errors import UsageError


def _number(text):
    """True for a GTID's number: ASCII digits only ('²'.isdigit() is true too), at most
    20 of them (a 64-bit sequence number)."""
    return text.isascii() and text.isdigit() and len(text) <= 20


class MariaGtidPos:
    """MariaDB GTID position: domain -> (server_id, seq_no) of its last transaction."""

    flavor = "mariadb"

    def __init__(self, domains=None):
        self.domains = dict(domains or {})

    @classmethod
    def parse(cls, text):
        """Parse ``D-S-N[,D-S-N...]`` (empty text gives an empty position)."""
        domains = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            parts = item.split("-")
            if len(parts) != 3 or not all(_number(p) for p in parts):
                raise UsageError(f"bad MariaDB GTID {item!r}: expected DOMAIN-SERVER-SEQ")
            domain, server_id, seq = map(int, parts)
            if domain in domains:
                raise UsageError(f"GTID position names domain {domain} twice")
            domains[domain] = (server_id, seq)
        return cls(domains)

    def add(self, domain, server_id, seq):
        """Record a transaction; a domain keeps the one with the highest seq_no."""
        current = self.domains.get(domain)
        if current is None or seq >= current[1]:
            self.domains[domain] = (server_id, seq)

    def contains(self, domain, server_id, seq):
        """True when transaction ``domain-server_id-seq`` is at or before this position."""
        current = self.domains.get(domain)
        return current is not None and seq <= current[1]

    def covers(self, other):
        """True when every domain of position ``other`` is at or before this one."""
        return all(self.contains(d, s, n) for d, (s, n) in other.domains.items())

    def copy(self):
        return MariaGtidPos(self.domains)

    def is_empty(self):
        return not self.domains

    def __eq__(self, other):
        return isinstance(other, MariaGtidPos) and self.domains == other.domains

    def __str__(self):
        return ",".join(f"{d}-{s}-{n}" for d, (s, n) in sorted(self.domains.items()))


_TAG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,31}$")  # a MySQL GTID tag


class MysqlGtidSet:
    """MySQL GTID set: uuid -> sorted disjoint list of [start, end) intervals."""

    flavor = "mysql"

    def __init__(self, sids=None):
        self.sids = {k.lower(): list(v) for k, v in (sids or {}).items()}

    @classmethod
    def parse(cls, text):
        """Parse ``uuid:1-5:7,uuid2:1-3`` (whitespace and newlines allowed), tagged
        GTIDs of MySQL 8.4+ included: ``uuid:1-3:nightly:1-2`` (after a tag, the
        intervals are that tag's; a tag is kept as the key ``uuid:tag``)."""
        result = cls()
        for item in filter(None, (p.strip() for p in text.replace("\n", "").split(","))):
            uuid, *parts = item.split(":")
            if len(uuid) != 36 or not parts:
                raise UsageError(f"bad MySQL GTID set item {item!r}: expected "
                                 "UUID[:TAG]:N[-M]")
            sid, ranges = uuid, 0
            for part in parts:
                if _TAG.match(part):
                    sid, ranges = f"{uuid}:{part.lower()}", 0
                    continue
                lo, _, hi = part.partition("-")
                if not _number(lo) or (hi and not _number(hi)):
                    raise UsageError(f"bad GTID interval {part!r} in {item!r}")
                result.add_interval(sid, int(lo), int(hi or lo) + 1)
                ranges += 1
            if not ranges:
                raise UsageError(f"bad MySQL GTID set item {item!r}: {sid} has no interval")
        return result

    def add(self, sid, gno):
        """Record transaction ``sid:gno``."""
        self.add_interval(sid, gno, gno + 1)

    def add_interval(self, sid, start, end):
        """Add [start, end) to ``sid`` and merge touching intervals."""
        ivs = self.sids.setdefault(sid.lower(), [])
        ivs.append((start, end))
        ivs.sort()
        merged = [ivs[0]]
        for lo, hi in ivs[1:]:
            if lo <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(hi, merged[-1][1]))
            else:
                merged.append((lo, hi))
        self.sids[sid.lower()] = merged

    def contains(self, sid, gno):
        return any(lo <= gno < hi for lo, hi in self.sids.get(sid.lower(), ()))

    def subtract(self, other):
        """The set of what this set holds and ``other`` lacks."""
        out = MysqlGtidSet()
        for sid, intervals in self.sids.items():
            for lo, hi in intervals:
                start = lo
                for olo, ohi in other.sids.get(sid, ()):
                    if ohi <= start or olo >= hi:
                        continue
                    if olo > start:
                        out.add_interval(sid, start, olo)
                    start = max(start, ohi)
                if start < hi:
                    out.add_interval(sid, start, hi)
        return out

    def covers(self, other):
        """True when every GTID of set ``other`` is in this one."""
        return other.subtract(self).is_empty()

    def copy(self):
        return MysqlGtidSet(self.sids)

    def is_empty(self):
        return not self.sids

    def __eq__(self, other):
        return isinstance(other, MysqlGtidSet) and self.sids == other.sids

    def __str__(self):
        """MySQL's text: per uuid its untagged intervals, then each tag with its own
        (``uuid:1-3:nightly:1-2``), uuids and tags in order."""
        by_uuid = {}
        for sid, ivs in self.sids.items():
            uuid, _, tag = sid.partition(":")
            by_uuid.setdefault(uuid, []).append((tag, ivs))
        items = []
        for uuid, tagged in sorted(by_uuid.items()):
            parts = [uuid]
            for tag, ivs in sorted(tagged):
                parts += ([tag] if tag else []) + [
                    f"{lo}" if hi == lo + 1 else f"{lo}-{hi - 1}" for lo, hi in ivs]
            items.append(":".join(parts))
        return ",".join(items)


def parse_gtid_set(text, flavor):
    """Parse a GTID set of ``flavor``; raise UsageError when it is malformed."""
    return MariaGtidPos.parse(text) if flavor == "mariadb" else MysqlGtidSet.parse(text)


def guess_flavor(text):
    """'mysql' when the set looks like uuid:intervals, else 'mariadb'."""
    return "mysql" if ":" in text else "mariadb"


def parse_one(text):
    """One transaction's GTID as a tuple: MariaDB ``D-S-N`` -> (domain, server_id, seq);
    MySQL ``UUID:N`` or ``UUID:TAG:N`` -> (``uuid`` or ``uuid:tag``, gno), lowercase, as
    a transaction's ``gtid_key`` is. UsageError when it is neither."""
    text = (text or "").strip()
    if ":" in text:
        head, _, gno = text.rpartition(":")
        one = MysqlGtidSet.parse(text)
        if len(one.sids) != 1 or not _number(gno):
            raise UsageError(f"bad GTID {text!r}: expected UUID[:TAG]:N")
        return head.lower(), int(gno)
    pos = MariaGtidPos.parse(text)
    if len(pos.domains) != 1:
        raise UsageError(f"bad GTID {text!r}: expected one DOMAIN-SERVER-SEQ or UUID[:TAG]:N")
    (domain, (server_id, seq)), = pos.domains.items()
    return domain, server_id, seq


def one_text(gtid):
    """The text of a tuple ``parse_one`` gives: ``D-S-N`` or ``UUID[:TAG]:N``."""
    return f"{gtid[0]}:{gtid[1]}" if len(gtid) == 2 else "-".join(map(str, gtid))


def covers(outer, inner):
    """True when GTID state ``outer`` holds every transaction of ``inner`` (both parsed,
    of one flavor); False across flavors."""
    return type(outer) is type(inner) and outer.covers(inner)


def contains(outer, inner):
    """True when GTID text ``inner`` is within GTID text ``outer`` (both of one flavor;
    an empty or missing ``inner`` is within anything known)."""
    if not inner:
        return outer is not None
    if outer is None:
        return False
    return covers(parse_gtid_set(outer, guess_flavor(outer)),
                  parse_gtid_set(inner, guess_flavor(inner)))


def holds(state, gtid):
    """True when the GTID state text ``state`` (either flavor) holds transaction ``gtid``
    (a ``parse_one`` tuple); False for a state of the other flavor or none."""
    if not state:
        return False
    value = parse_gtid_set(state, guess_flavor(state))
    if (len(gtid) == 2) != isinstance(value, MysqlGtidSet):
        return False
    return value.contains(*gtid)


def shown(state, none="(none)"):
    """A GTID state or set as a line shows it: ``none`` for an empty or missing one (an
    archive of a source that keeps no GTIDs has none)."""
    return state if state else none


def gtid_text(gtid):
    """'0-1-5' / 'uuid:5' of a tracker's (flavor, ...) GTID tuple, or None."""
    if gtid is None:
        return None
    return "-".join(map(str, gtid[1:])) if gtid[0] == "mariadb" else f"{gtid[1]}:{gtid[2]}"
