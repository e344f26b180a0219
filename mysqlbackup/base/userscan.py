"""The users section of a dump base, and what the target user needs to load it (pure:
bytes in, bytes and facts out, fed in chunks of any size). ``base`` scans the dump as
it streams and records ``needs`` in the manifest; ``restore --users`` checks them, or
filters the section out.

A MariaDB dump base (``mariadb-dump --system=users``) recreates the source's accounts
after every database's data, before the trailer::

    CREATE USER IF NOT EXISTS `root`@`localhost`;
    ...
    SELECT COALESCE(CURRENT_ROLE(),'NONE') into @current_role;
    CREATE ROLE IF NOT EXISTS mariadb_dump_import_role;
    ...
    GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION;
    GRANT PROXY ON ``@`%` TO `root`@`localhost` WITH GRANT OPTION;
    ...
    DROP ROLE mariadb_dump_import_role;
    /*M!100203 EXECUTE IMMEDIATE CONCAT('SET ROLE ', @current_role) */;

A base the tool wrote the section of itself puts it between ``-- mysqlbackup users:
begin`` and ``-- mysqlbackup users: end`` (a MariaDB base: the same statements; a
MySQL base: ``CREATE ROLE IF NOT EXISTS `r`@`%```, ``CREATE USER IF NOT EXISTS``,
``GRANT``, ``ALTER USER ... DEFAULT ROLE``, no import role). A section starts at the
first line starting ``CREATE USER IF NOT EXISTS `` (or at the begin line) and ends
with the ``EXECUTE IMMEDIATE`` line (or the end line); a section without its last
line ends at the trailer's first line (blank, ``-- ...`` or ``/*!40103 SET TIME_ZONE``).
A data line never starts with these texts (the dump escapes newlines in values), nor
does a line inside ``DELIMITER ;;`` ... ``DELIMITER ;`` (a routine's, trigger's or
event's body, printed as written) count.

``UsersScan`` lists what a section needs of the user that loads it (``needs``):
``CREATE USER`` (accounts and roles), ``GRANT OPTION`` (a GRANT of privileges, USAGE
too), ``PROXY`` (a ``GRANT PROXY`` line: the loader needs ``PROXY ON ''@'%' WITH GRANT
OPTION``, or the server refuses it with ERROR 1698; MySQL's ``''@''`` will do too),
then each privilege granted (held on ``*.*``: ``ALL PRIVILEGES`` covers all; UPDATE for
``SET DEFAULT ROLE ... FOR`` and ``GRANT ... IDENTIFIED BY``, which write the mysql
schema: ERROR 1044 without; ROLE_ADMIN for a role granted outside the dump's import
role: MySQL's ``GRANT `r`@`%` TO ...``, ERROR 1227 without). It
also numbers the lines and follows the ``-- Current Database:`` and ``USE`` lines, so
that a failed load can say where it stopped. ``UsersFilter`` is the
same scan returning the stream without its users sections (``restore --users skip``).
``TargetGrants`` reads the target user's ``SHOW GRANTS`` and says what it lacks.

Only the start of each line is looked at, with ``bytes.find`` over the chunk (a
line by line loop over a whole base would be slow); a line that may be one of ours
is held until complete (ours are short: a data line never starts like one), the rest
passes at once.
"""

import re

from mysqlbackup.errors import UsageError

BEGIN_MARK = b"-- mysqlbackup users: begin"
END_MARK = b"-- mysqlbackup users: end"
FIRST = b"CREATE USER IF NOT EXISTS "
LAST = b"EXECUTE IMMEDIATE CONCAT('SET ROLE ', @current_role)"
TRAILER = (b"-- ", b"/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE")  # (or a blank line) after a
                                                              # section without LAST
IMPORT_ROLE = "mariadb_dump_import_role"  # the dump's own, created and dropped by it
DELIMITED = b"DELIMITER ;;"
UNDELIMITED = b"DELIMITER ;"
USE, CURRENT = b"USE `", b"-- Current Database: `"
OUTSIDE = (FIRST, BEGIN_MARK, DELIMITED, USE, CURRENT)

# the needs that are not privileges
CREATE_USER, GRANT_OPTION, PROXY = "CREATE USER", "GRANT OPTION", "PROXY"
ALL = "ALL PRIVILEGES"
WRITE_MYSQL = "UPDATE"  # what SET DEFAULT ROLE FOR and GRANT ... IDENTIFIED BY need
ROLE_ADMIN = "ROLE_ADMIN"  # what MySQL's GRANT role TO account needs (no import role there)
_NAME = rb"('(?:[^'\\]|\\.|'')*'|`(?:[^`]|``)*`|[^\s*;@]+)"
_ROLE = re.compile(rb"CREATE ROLE IF NOT EXISTS " + _NAME + rb"(?:@" + _NAME + rb")?")


class UsersScan:
    """Feed a dump's bytes in order (``feed`` returns b"": a transform whose output is
    nothing); then ``accounts``, ``roles``, ``needs()``; ``where(line)`` says what a
    line of the stream was in."""

    def __init__(self):
        self.accounts = 0            # CREATE USER lines
        self.roles = set()           # roles created (the dump's import role not counted)
        self.privileges = set()      # privileges granted (ON ...), PROXY apart
        self.proxy = self.grants = False
        self.line = 1                # the number of the line at the position reached
        self.marks = [(1, "head")]   # (first line, what: 'head', 'db NAME', 'users', 'tail')
        self.sections = 0            # users sections seen (whole or begun)
        self._section = None         # None (outside), "dump" or "marked" (between marks)
        self._import_role = False    # the section made the dump's import role (MariaDB)
        self._delimited = False      # inside DELIMITER ;; ... DELIMITER ;
        self._held = b""             # the start of an incomplete line that may be ours
        self._at_start = True        # the next byte starts a line

    # -- what the scan found ---------------------------------------------------------

    def needs(self):
        """What the sections need of the user loading them, in a stable order: CREATE
        USER, GRANT OPTION, PROXY, then each privilege granted."""
        return ([CREATE_USER] if self.accounts or self.roles else []) \
            + ([GRANT_OPTION] if self.grants else []) + ([PROXY] if self.proxy else []) \
            + sorted(self.privileges - {CREATE_USER})

    def left_out(self):
        """'N accounts and R roles' (for ``--users skip``)."""
        return (f"{self.accounts} account{'s' * (self.accounts != 1)} and {len(self.roles)} "
                f"role{'s' * (len(self.roles) != 1)}")

    def where(self, line=None):
        """What the stream was in at ``line`` (default: the position reached), for an
        error line: 'in database `db`', 'in the users section ...' and so on."""
        line = self.line if line is None else line
        what = [w for first, w in self.marks if first <= line][-1]
        return {"head": "in the dump's header, before any database",
                "users": "in the users section, after every database's data",
                "tail": "in the dump's trailer, after the users section"}.get(
                    what, f"in database `{what[3:]}`")

    # -- the stream --------------------------------------------------------------------

    def feed(self, data):
        self._scan(data, None)
        return b""

    def finish(self):
        rest, self._held = self._held, b""
        if rest:
            self._scan(rest + b"\n", None, last=True)
        return b""

    def _scan(self, data, out, last=False):
        """Scan ``data``; append the bytes kept (outside the sections) to ``out`` (a
        list) when given. ``last``: ``data`` ends with a newline added by ``finish``,
        not the stream's own (kept out of ``out``)."""
        buf = self._held + data if self._held else data
        self._held = b""
        pos, n, found = 0, len(buf), {}
        while pos < n:
            if self._section:
                end = buf.find(b"\n", pos)
                if end < 0:
                    self._hold(buf, pos)
                    return
                line = buf[pos:end + 1]
                if self._section == "dump" and (line.startswith(TRAILER) or not line.strip()):
                    self._end_section(False)
                    continue  # the trailer's line, outside
                self._section_line(line)
                self.line += 1
                pos = end + 1
                continue
            start = self._next_start(buf, pos, found)
            if start is None:  # no line of ours starts in buf[pos:]: all goes but a tail
                tail = buf.rfind(b"\n", pos) + 1 or (pos if self._at_start else n)
                if tail < n and self._maybe_ours(buf[tail:]):
                    self._emit(out, buf, pos, tail)
                    self._hold(buf, tail)
                    return
                self._emit(out, buf, pos, n, last)
                self._at_start = buf.endswith(b"\n")
                return
            self._emit(out, buf, pos, start)
            end = buf.find(b"\n", start)
            if end < 0:
                self._hold(buf, start)
                return
            line = buf[start:end + 1]
            if self._outside_line(line):
                pos = start  # a section starts: the line is the section's
                continue
            self._emit(out, buf, start, end + 1, last and end + 1 == n)
            pos, self._at_start = end + 1, True

    def _next_start(self, buf, pos, found):
        """Where the next line that may be ours starts in ``buf[pos:]``, or None.
        ``found``: {prefix: where its next "\n" + prefix was found (-1: nowhere)} in
        ``buf``, kept by the caller so that each is searched for once per chunk."""
        prefixes = (UNDELIMITED,) if self._delimited else OUTSIDE
        if self._at_start and buf.startswith(prefixes, pos):
            return pos
        for p in prefixes:
            if p not in found or 0 <= found[p] < pos:
                found[p] = buf.find(b"\n" + p, pos)
        starts = [found[p] for p in prefixes if found[p] >= 0]
        return min(starts) + 1 if starts else None

    def _maybe_ours(self, tail):
        prefixes = (UNDELIMITED,) if self._delimited else OUTSIDE
        return any(p.startswith(tail[:len(p)]) for p in prefixes)

    def _hold(self, buf, pos):
        self._held, self._at_start = buf[pos:], True

    def _emit(self, out, buf, start, end, drop_last_newline=False):
        """buf[start:end] passes (kept, its lines counted)."""
        if start >= end:
            return
        self.line += buf.count(b"\n", start, end)
        if out is not None:
            out.append(buf[start:end - 1] if drop_last_newline else buf[start:end])

    def _outside_line(self, line):
        """A line of ours outside a section; True when it starts one."""
        if self._delimited:
            if line.rstrip() == UNDELIMITED:
                self._delimited = False
            return False
        if line.startswith(DELIMITED):
            self._delimited = True
        elif line.startswith((USE, CURRENT)):
            name = line.rstrip().rstrip(b";")[line.index(b"`") + 1:-1].replace(b"``", b"`")
            self.marks.append((self.line, "db " + name.decode("utf-8", "replace")))
        elif line.startswith((FIRST, BEGIN_MARK)):
            self._section = "marked" if line.startswith(BEGIN_MARK) else "dump"
            self._import_role = False
            self.sections += 1
            self.marks.append((self.line, "users"))
            return True
        return False

    def _end_section(self, counted_line):
        self._section, self._at_start = None, True
        self.marks.append((self.line + counted_line, "tail"))

    def _section_line(self, line):
        """One line of a section: counted, and the section ended by its last line."""
        text = line.strip()
        if self._section == "marked" and text == END_MARK:
            return self._end_section(True)
        if self._section == "dump" and LAST in text:
            return self._end_section(True)
        if text.startswith(FIRST):
            self.accounts += 1
            return
        role = _ROLE.search(text)
        if role:
            name = _unquote(role[1].decode("utf-8", "replace"))
            if name == IMPORT_ROLE:
                self._import_role = True
            else:  # a MySQL role is an account: its host too
                self.roles.add(name if role[2] is None else
                               name + "@" + _unquote(role[2].decode("utf-8", "replace")))
            return
        if b"SET DEFAULT ROLE " in text:  # another account's: written into mysql.*
            self.privileges.add(WRITE_MYSQL)
            return
        if text.startswith(b"GRANT "):
            grant = parse_grant(text.rstrip(b";").decode("utf-8", "replace"))
            if grant is None:  # a role granted: the dump's import role administers it,
                if not self._import_role:  # else (MySQL) the loader needs ROLE_ADMIN
                    self.privileges.add(ROLE_ADMIN)
                return
            privileges, _, _, _ = grant
            if privileges == [PROXY]:
                self.proxy = True
                return
            self.grants = True  # GRANT USAGE too needs the grant option
            self.privileges.update(p for p in privileges if p != "USAGE")
            if b" IDENTIFIED " in text:  # a password set by GRANT: written into mysql.*
                self.privileges.add(WRITE_MYSQL)


class UsersFilter(UsersScan):
    """The stream without its users sections (``feed``/``finish`` return the bytes
    kept), what they held counted as by UsersScan."""

    def feed(self, data):
        out = []
        self._scan(data, out)
        return b"".join(out)

    def finish(self):
        rest, self._held = self._held, b""
        if not rest:
            return b""
        out = []
        self._scan(rest + b"\n", out, last=True)
        return b"".join(out)


class UsersRefused(UsageError):
    """``--users apply``: the target user cannot create the base's accounts (exit 2,
    before anything is loaded)."""


# -- GRANT statements and the target user's privileges -------------------------------------

def _split_top(text, word):
    """The index of ``word`` (e.g. ' ON ') in ``text`` outside quotes and parentheses,
    or -1."""
    depth, quote, i, n = 0, None, 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == "'":
                i += 1
            elif c == quote:
                quote = None
        elif c in "`'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and text.startswith(word, i):
            return i
        i += 1
    return -1


def _split_list(text):
    """A privilege list split at its top-level commas, column lists dropped, upper-cased."""
    names, depth, current = [], 0, []
    for c in text:
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            names.append("".join(current))
            current = []
        elif depth == 0:
            current.append(c)
    names.append("".join(current))
    return [" ".join(n.split()).upper() for n in names if n.strip()]


def _unquote(name):
    name = name.strip()
    if len(name) >= 2 and name[0] == name[-1] and name[0] in "`'\"":
        q = name[0]
        return name[1:-1].replace(q + q, q).replace("\\'", "'") if q == "'" else \
            name[1:-1].replace(q + q, q)
    return name


def _account(text):
    """(user, host) of an account as SQL writes it: `u`@`h`, 'u'@'h', u@h, or a role."""
    at = _split_top(text, "@")
    if at < 0:
        return _unquote(text), ""
    return _unquote(text[:at]), _unquote(text[at + 1:])


def parse_grant(statement):
    """(privileges, object, grantee (user, host), with grant option) of a ``GRANT ... ON
    ... TO ...`` statement (a dump's line or a SHOW GRANTS row; no trailing ';'); None
    for a role granted (``GRANT role TO ...``) or a statement it cannot read."""
    if not statement.startswith("GRANT "):
        return None
    body = statement[len("GRANT "):]
    on, to = _split_top(body, " ON "), _split_top(body, " TO ")
    if on < 0 or to < 0 or to < on:
        return None
    privileges = _split_list(body[:on])
    rest = body[to + len(" TO "):]
    grantee_end = min([i for i in (_split_top(rest, " " + w) for w in
                                   ("IDENTIFIED ", "REQUIRE ", "WITH ", "VIA ", "USING "))
                       if i >= 0] or [len(rest)])
    tail = rest[grantee_end:]
    option = _split_top(tail, "GRANT OPTION") >= 0
    return privileges, body[on + len(" ON "):to].strip(), _account(rest[:grantee_end]), option


class TargetGrants:
    """What the target user holds, from ``SELECT CURRENT_USER()`` and its ``SHOW GRANTS
    FOR CURRENT_USER()`` rows: the privileges on ``*.*`` (a role's are not counted: the
    dump's users section runs under a role of its own), their grant option, and PROXY
    on ''@'%' (MySQL: ''@'') with grant option."""

    def __init__(self, current_user, rows):
        self.user, _, self.host = current_user.rpartition("@")
        self.privileges, self.grant_option, self.proxy = set(), False, False
        for row in rows:
            grant = parse_grant(row.strip().rstrip(";"))
            if grant is None:
                continue
            privileges, target, (user, host), option = grant
            if user != self.user or host.lower() != self.host.lower():
                continue  # a role's grants (listed when it is active)
            if privileges == [PROXY]:
                self.proxy = self.proxy or (option and _account(target) in (("", "%"),
                                                                            ("", "")))
            elif target.replace("`", "") == "*.*":
                self.privileges.update(privileges)
                self.grant_option = self.grant_option or option

    @property
    def account(self):
        return "'{}'@'{}'".format(self.user.replace("'", "\\'"), self.host.replace("'", "\\'"))

    def has_everything(self):
        """True when no base can need more (ALL on *.* and PROXY, both with grant
        option): the base's needs need not be read."""
        return ALL in self.privileges and self.grant_option and self.proxy

    def missing(self, needs):
        """The ``needs`` (UsersScan.needs or a base manifest's) the user lacks; a need
        other than CREATE USER, GRANT OPTION and PROXY is a privilege, held on *.*."""
        held = self.privileges
        lacks = []
        for need in needs:
            if need == GRANT_OPTION:
                ok = self.grant_option
            elif need == PROXY:
                ok = self.proxy
            else:
                ok = ALL in held or need.upper() in held
            if not ok and need not in lacks:
                lacks.append(need)
        if ALL in lacks:  # it holds every other privilege: one to name
            lacks = [n for n in lacks if n in (GRANT_OPTION, PROXY, ALL)]
        return lacks

    def refusal(self, lacks):
        """The one line refusing a ``--users apply`` restore: what is lacking and the
        GRANT statements that give it."""
        fixes = []
        privileges = [p for p in lacks if p not in (GRANT_OPTION, PROXY)]
        if privileges or GRANT_OPTION in lacks:
            fixes.append(f"GRANT {', '.join(privileges) or 'USAGE'} ON *.* TO {self.account} "
                         "WITH GRANT OPTION")
        if PROXY in lacks:
            fixes.append(f"GRANT PROXY ON ''@'%' TO {self.account} WITH GRANT OPTION")
        names = lacks[0] if len(lacks) == 1 else ", ".join(lacks[:-1]) + " and " + lacks[-1]
        return (f"the target user {self.account} lacks {names}, which the base's accounts "
                f"need ({'; '.join(fixes)}): grant {'it' if len(lacks) == 1 else 'them'}, "
                "or restore with --users skip")
