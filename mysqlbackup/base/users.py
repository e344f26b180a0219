"""The accounts of a MariaDB dump base when the source holds accounts it ignores.

A server running ``skip_name_resolve`` ignores every account whose host is a name
(``root@<hostname>``, which ``mariadb-install-db`` creates, is one): it cannot show
them, and ``mariadb-dump --system=users`` then fails ("Can't find any matching row
in the user table") and takes no base. ``survey`` asks the server which accounts it
can show (those it cannot are the ignored ones); when there are any, the dump runs
without ``--system=users`` and ``section`` writes the accounts' statements after it,
in the shape ``mariadb-dump`` gives them (CREATE USER IF NOT EXISTS, the roles
created under a temporary import role, then each account's and role's grants),
between the lines ``BEGIN`` and ``END``. The ignored accounts are named in one warning
line and in the base's manifest (``details.skipped_accounts``).

A MySQL dump base always gets its accounts from us: MySQL's ``mysqldump --users``
(9.3 and later) writes ``CREATE USER`` without ``IF NOT EXISTS`` (a target's own
accounts stop the load; ``--add-drop-user`` would drop the loading user itself), the
password hashes as raw strings, and the accounts at the top of the dump but their
grants at its end. ``survey_mysql`` reads, with ``print_identified_with_as_hex`` on
(hashes as hex literals, never raw bytes), each account's ``SHOW CREATE USER`` and
``SHOW GRANTS``, MySQL's reserved accounts (``reserved``) left out; ``section``
writes them between the same lines: every account created first (``CREATE USER IF
NOT EXISTS``; a role, an account in exactly the shape ``CREATE ROLE`` makes,
``CREATE ROLE IF NOT EXISTS``), its default roles taken out of it, then every grant
(roles granted included), then the default roles (``ALTER USER ... DEFAULT ROLE``,
which needs them granted). A source user who may not read the mysql schema is refused
before the dump runs (mysqldump would fail on the schema's tables anyway); a server too
old to print hashes as hex gives a base without accounts: one warning line, and the
reason in the manifest (``details.accounts_unread``).
"""

from dataclasses import dataclass, field

import pymysql

from mysqlbackup.base.userscan import BEGIN_MARK, END_MARK, IMPORT_ROLE, _split_top
from mysqlbackup.errors import SourceError

BEGIN, END = BEGIN_MARK.decode(), END_MARK.decode()   # the lines around our section
ER_PASSWORD_NO_MATCH = 1133    # "Can't find any matching row in the user table"
ER_NONEXISTING_GRANT = 1141    # "There is no such grant defined for user"
ER_CANNOT_USER = 1396          # "Operation SHOW CREATE USER failed for ..." (no such account)
ER_UNKNOWN_VARIABLE = 1193
# the mysql schema not readable: SELECT denied on a table, a column, the schema; a privilege
ACCESS_DENIED = (1142, 1143, 1044, 1227)
# MySQL's reserved accounts (data directory initialization makes them): the target has
# its own. Any other locked mysql.*@localhost account is taken for one of them too.
MYSQL_RESERVED = (("root", "localhost"), ("mysql.sys", "localhost"),
                  ("mysql.session", "localhost"), ("mysql.infoschema", "localhost"))
SECRET = " AS <secret>"  # SHOW CREATE USER's hash, to its own user without SELECT on mysql.user
DEFAULT_ROLE, REQUIRE = " DEFAULT ROLE ", " REQUIRE "
# what SHOW CREATE USER says of an account CREATE ROLE made, after its plugin
ROLE_SHAPE = ("REQUIRE NONE PASSWORD EXPIRE ACCOUNT LOCK PASSWORD HISTORY DEFAULT PASSWORD "
              "REUSE INTERVAL DEFAULT PASSWORD REQUIRE CURRENT DEFAULT")


@dataclass
class Accounts:
    """What a base records of the source's accounts."""

    users: list = field(default_factory=list)    # (name, CREATE USER text, [grant texts])
    roles: list = field(default_factory=list)    # (name, [grant texts])
    ignored: list = field(default_factory=list)  # names ('root'@'host') the server ignores
    flavor: str = "mariadb"   # "mysql": users only (MySQL's roles are accounts), its shape
    unread: str = None        # MySQL: why the accounts could not be read (none then)


def account_name(user, host=None):
    """``user``@``host`` quoted as the server quotes it (a role: ``user`` alone)."""
    quote = lambda s: "`" + s.replace("`", "``") + "`"  # noqa: E731
    return quote(user) if host is None else f"{quote(user)}@{quote(host)}"


def survey(conn):
    """The source's accounts (a PyMySQL connection of a user with SELECT on mysql.*):
    each account's CREATE USER and grants, each role's grants, and the accounts the
    server cannot show (it ignores them)."""
    found = Accounts()
    for user, host, is_role in _rows(conn, "SELECT user, host, is_role FROM mysql.user "
                                           "ORDER BY is_role, user, host"):
        user, host = _text(user), _text(host)
        if _text(is_role) == "Y":
            found.roles.append((user, _grants(conn, account_name(user))))
            continue
        name = account_name(user, host)
        try:
            create = _rows(conn, f"SHOW CREATE USER {name}")[0][0]
        except pymysql.err.MySQLError as e:
            if e.args[0] not in (ER_PASSWORD_NO_MATCH, ER_NONEXISTING_GRANT):
                raise SourceError(f"the source refused SHOW CREATE USER {name}: "
                                    f"{e.args[-1]}") from None
            found.ignored.append(f"'{user}'@'{host}'")
            continue
        found.users.append((name, _text(create), _grants(conn, name)))
    return found


def survey_mysql(conn, who="the source user"):
    """A MySQL source's accounts (a PyMySQL connection of ``who``, a user with SELECT on
    the mysql schema): each one's SHOW CREATE USER (hashes as hex) and SHOW GRANTS, the
    reserved accounts left out. A server that cannot print hashes as hex (before 8.0.17)
    gives none, ``unread`` saying why; an account dropped while it is read is left out
    (it is gone). SourceError when ``who`` may not read them, naming the grant."""
    found = Accounts(flavor="mysql")
    try:
        _rows(conn, "SET SESSION print_identified_with_as_hex = ON")
    except pymysql.err.MySQLError as e:
        if e.args[0] != ER_UNKNOWN_VARIABLE:
            raise _refused(e, who, "SET print_identified_with_as_hex") from None
        found.unread = ("the source cannot print password hashes as hex "
                        "(print_identified_with_as_hex: MySQL 8.0.17 and later)")
        return found
    try:
        rows = _rows(conn, "SELECT user, host, account_locked FROM mysql.user "
                           "ORDER BY user, host")
    except pymysql.err.MySQLError as e:
        raise _refused(e, who, "the list of its accounts") from None
    for user, host, locked in rows:
        user, host = _text(user), _text(host)
        if reserved(user, host, _text(locked) == "Y"):
            continue
        name = account_name(user, host)
        try:
            create = _text(_rows(conn, f"SHOW CREATE USER {name}")[0][0])
            grants = _grants(conn, name)
        except pymysql.err.MySQLError as e:
            if e.args[0] in (ER_CANNOT_USER, ER_NONEXISTING_GRANT):
                continue  # dropped since the listing
            raise _refused(e, who, f"SHOW CREATE USER {name}") from None
        if SECRET in create:  # its own account, without SELECT on mysql.user
            raise SourceError(_lacking(who, "SHOW CREATE USER hides its password hash"))
        found.users.append((name, create, grants))
    return found


def _refused(error, who, what):
    """The SourceError of a refused statement: what ``who`` lacks when it is a privilege."""
    code, message = error.args[0], error.args[-1]
    if code in ACCESS_DENIED:
        return SourceError(_lacking(who, message))
    return SourceError(f"the source refused {what}: {message}")


def _lacking(who, why):
    return (f"{who} may not read the mysql schema ({why}), which base --method dump of a "
            f"MySQL source needs: the accounts are read there, and mysqldump reads its tables "
            f"(GRANT SELECT ON mysql.* TO ...)")


def reserved(user, host, locked=False):
    """True for one of MySQL's reserved accounts (root@localhost, mysql.sys,
    mysql.session, mysql.infoschema at localhost, or another locked mysql.*@localhost):
    a target has its own, which a base must not change."""
    host = host.lower()
    return (user, host) in MYSQL_RESERVED or (
        locked and host == "localhost" and user.startswith("mysql."))


def split_default_roles(create):
    """``SHOW CREATE USER`` text without its ``DEFAULT ROLE ...`` clause (it comes before
    ``REQUIRE``), and the clause's roles (None when it has none)."""
    at, require = _split_top(create, DEFAULT_ROLE), _split_top(create, REQUIRE)
    if at < 0 or (0 <= require < at):
        return create, None
    end = require if require >= 0 else len(create)
    return create[:at] + create[end:], create[at + len(DEFAULT_ROLE):end].strip()


def create_statement(name, create):
    """The statement creating account ``name`` from its SHOW CREATE USER text (no
    DEFAULT ROLE clause): ``CREATE ROLE IF NOT EXISTS`` for an account in the shape
    CREATE ROLE makes (locked, password expired, no password, nothing else), else the
    text with ``IF NOT EXISTS``."""
    head = f"CREATE USER {name} IDENTIFIED WITH '"
    if create.startswith(head):
        plugin_end = create.find("' ", len(head))
        if plugin_end > 0 and create[plugin_end + 2:] == ROLE_SHAPE:
            return f"CREATE ROLE IF NOT EXISTS {name}"
    return _if_not_exists(create)


def mysql_section(accounts):
    """The SQL text restoring a MySQL source's ``accounts`` (bytes, between BEGIN and END
    lines; b"" when there are none): roles, then the other accounts, created; every
    grant; the default roles."""
    if not accounts.users:
        return b""
    roles, others, grants, defaults = [], [], [], []
    for name, create, account_grants in accounts.users:
        create, default = split_default_roles(create)
        statement = create_statement(name, create)
        (roles if statement.startswith("CREATE ROLE ") else others).append(statement)
        grants += account_grants
        if default:
            defaults.append(f"ALTER USER {name} DEFAULT ROLE {default}")
    return "\n".join([BEGIN] + [s + ";" for s in roles + others + grants + defaults]
                     + [END, ""]).encode("utf-8")


def section(accounts):
    """The SQL text restoring ``accounts`` (bytes, between BEGIN and END lines): MySQL's
    (``mysql_section``) or in mariadb-dump's shape."""
    if accounts.flavor == "mysql":
        return mysql_section(accounts)
    lines = [BEGIN]
    for _, create, _ in accounts.users:
        lines.append(_if_not_exists(create) + ";")
    lines += ["SELECT COALESCE(CURRENT_ROLE(),'NONE') into @current_role;",
              f"CREATE ROLE IF NOT EXISTS {IMPORT_ROLE};",
              f"GRANT {IMPORT_ROLE} TO CURRENT_USER();", f"SET ROLE {IMPORT_ROLE};"]
    for role, _ in accounts.roles:
        lines.append(f"CREATE ROLE IF NOT EXISTS {account_name(role)} WITH ADMIN {IMPORT_ROLE};")
    for _, _, grants in accounts.users:
        lines += [g + ";" for g in grants]
    for _, grants in accounts.roles:
        lines += [g + ";" for g in grants]
    lines += ["SET ROLE NONE;", f"DROP ROLE {IMPORT_ROLE};",
              "EXECUTE IMMEDIATE CONCAT('SET ROLE ', @current_role);", END, ""]
    return "\n".join(lines).encode("utf-8")


def _if_not_exists(create):
    head = "CREATE USER "
    if create.upper().startswith(head) and not create.upper().startswith(head + "IF "):
        return head + "IF NOT EXISTS " + create[len(head):]
    return create


def _grants(conn, name):
    return [_text(row[0]) for row in _rows(conn, f"SHOW GRANTS FOR {name}")]


def _rows(conn, sql):
    with conn.cursor() as cur:
        cur.execute(sql)
        return cur.fetchall()


def _text(value):
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else value
