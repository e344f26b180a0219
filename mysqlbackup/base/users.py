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
"""

from dataclasses import dataclass, field

import pymysql

from mysqlbackup.base.userscan import BEGIN_MARK, END_MARK, IMPORT_ROLE
from mysqlbackup.errors import SourceError

BEGIN, END = BEGIN_MARK.decode(), END_MARK.decode()   # the lines around our section
ER_PASSWORD_NO_MATCH = 1133    # "Can't find any matching row in the user table"
ER_NONEXISTING_GRANT = 1141    # "There is no such grant defined for user"


@dataclass
class Accounts:
    """What a base records of the source's accounts."""

    users: list = field(default_factory=list)    # (name, CREATE USER text, [grant texts])
    roles: list = field(default_factory=list)    # (name, [grant texts])
    ignored: list = field(default_factory=list)  # names ('root'@'host') the server ignores


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


def section(accounts):
    """The SQL text restoring ``accounts`` (bytes, between BEGIN and END lines)."""
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
