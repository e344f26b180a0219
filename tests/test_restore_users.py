"""restore --users: the users section of a dump found, left out and read for what it
needs; the target user's SHOW GRANTS read; a failed load's line (pure: real
mariadb-dump 10.11 text, fed in chunks of every size). A MySQL base's section as base
writes it (users.survey_mysql against a stand-in connection, users.section) and as
restore reads it."""

import types

import pytest

from replay.restore.load import load_failure
from replay.restore.run import RestoreOptions, manifest_users, users_lines
from mysqlbackup.base.userscan import TargetGrants, UsersFilter, UsersScan, parse_grant

HEAD = b"""\
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40103 SET TIME_ZONE='+00:00' */;
-- CHANGE MASTER TO MASTER_LOG_FILE='binlog.000001', MASTER_LOG_POS=325;

--
-- Current Database: `shop`
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop` /*!40100 DEFAULT CHARACTER SET latin1 */;

USE `shop`;

--
-- Table structure for table `t`
--

DROP TABLE IF EXISTS `t`;
CREATE TABLE `t` (
  `id` int(11) DEFAULT NULL,
  `note` text DEFAULT NULL
) ENGINE=InnoDB DEFAULT CHARSET=latin1 COLLATE=latin1_swedish_ci;

--
-- Dumping data for table `t`
--

LOCK TABLES `t` WRITE;
INSERT IGNORE INTO `t` VALUES
(1,'CREATE USER IF NOT EXISTS `x`@`%`;\\nGRANT PROXY ON ``@`%` TO `x`@`%`;'),
(2,'-- mysqlbackup users: begin');
UNLOCK TABLES;

--
-- Dumping routines for database 'shop'
--
/*!50003 DROP PROCEDURE IF EXISTS `mk` */;
DELIMITER ;;
CREATE DEFINER=`root`@`localhost` PROCEDURE `mk`()
BEGIN
CREATE USER IF NOT EXISTS `made`@`%`;
USE `nowhere`;
END ;;
DELIMITER ;

--
-- Current Database: `b``q`
--

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `b``q`;

USE `b``q`;
"""

USERS = b"""\
CREATE USER IF NOT EXISTS `mariadb.sys`@`localhost` ACCOUNT LOCK PASSWORD EXPIRE;
CREATE USER IF NOT EXISTS `root`@`localhost`;
CREATE USER IF NOT EXISTS `app`@`10.0.0.%` IDENTIFIED BY PASSWORD 'HASH';
SELECT COALESCE(CURRENT_ROLE(),'NONE') into @current_role;
CREATE ROLE IF NOT EXISTS mariadb_dump_import_role;
GRANT mariadb_dump_import_role TO CURRENT_USER();
SET ROLE mariadb_dump_import_role;
/*!80001 CREATE ROLE IF NOT EXISTS 'r1' */;
/*M!100005 CREATE ROLE IF NOT EXISTS 'r1' WITH ADMIN mariadb_dump_import_role */;
/*M!100005 GRANT 'r1' TO 'root'@'localhost' WITH ADMIN OPTION */;
GRANT USAGE ON *.* TO `mariadb.sys`@`localhost`;
GRANT SELECT, DELETE ON `mysql`.`global_priv` TO `mariadb.sys`@`localhost`;
/*M!100005 SET DEFAULT ROLE NONE FOR 'mariadb.sys'@'localhost' */;
/*!80001 ALTER USER 'mariadb.sys'@'localhost' DEFAULT ROLE NONE */;
GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION;
GRANT PROXY ON ``@`%` TO `root`@`localhost` WITH GRANT OPTION;
/*M!100005 SET DEFAULT ROLE NONE FOR 'root'@'localhost' */;
GRANT `r1` TO `app`@`10.0.0.%`;
GRANT SELECT ON *.* TO `app`@`10.0.0.%` IDENTIFIED BY PASSWORD 'HASH';
GRANT SELECT, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `repl`@`127.0.0.1`;
GRANT USAGE ON *.* TO `r1`;
SET ROLE NONE;
DROP ROLE mariadb_dump_import_role;
/*M!100203 EXECUTE IMMEDIATE CONCAT('SET ROLE ', @current_role) */;
""".replace(b"HASH", b"*B69027D44F6E5EDC07F1AEAD1ACFB3C1E9E22FFD")

TAIL = b"""\

-- The deferred gtid setting for slave corresponding to the master-data CHANGE-MASTER follows

-- Preferably use GTID to start replication from GTID position:

-- SET GLOBAL gtid_slave_pos='0-1-7';
/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

/*!40101 SET CHARACTER_SET_CLIENT=@OLD_CHARACTER_SET_CLIENT */;

-- Dump completed on 2026-11-26  6:39:54
"""

DUMP = HEAD + USERS + TAIL
NEEDS = ["CREATE USER", "GRANT OPTION", "PROXY", "ALL PRIVILEGES", "BINLOG MONITOR", "DELETE",
         "REPLICATION SLAVE", "SELECT", "UPDATE"]
SIZES = (1, 2, 3, 5, 13, 64, 1000, len(DUMP))


def fed(scan, data, size):
    out = b"".join(scan.feed(data[i:i + size]) for i in range(0, len(data), size))
    return out + scan.finish()


def line_of(data, text):
    return data[:data.index(text)].count(b"\n") + 1


@pytest.mark.parametrize("size", SIZES)
def test_the_filter_drops_the_users_section_alone_whatever_the_chunks(size):
    users = UsersFilter()
    assert fed(users, DUMP, size) == HEAD + TAIL
    assert (users.accounts, users.roles, users.sections) == (3, {"r1"}, 1)
    assert users.left_out() == "3 accounts and 1 role"
    assert users.needs() == NEEDS
    # without the stream's last newline: the same, without it
    users = UsersFilter()
    assert fed(users, DUMP[:-1], size) == (HEAD + TAIL)[:-1]


@pytest.mark.parametrize("size", (1, 7, 4096))
def test_the_scanner_reads_the_same_stream_and_returns_nothing(size):
    scan = UsersScan()
    assert fed(scan, DUMP, size) == b""
    assert scan.needs() == NEEDS and scan.accounts == 3
    assert scan.marks == [(1, "head"), (line_of(DUMP, b"-- Current Database: `shop`"), "db shop"),
                          (line_of(DUMP, b"USE `shop`"), "db shop"),
                          (line_of(DUMP, b"-- Current Database: `b``q`"), "db b`q"),
                          (line_of(DUMP, b"USE `b``q`"), "db b`q"),
                          (line_of(DUMP, USERS[:30]), "users"),
                          (line_of(DUMP, TAIL[:20]), "tail")]
    assert scan.line == DUMP.count(b"\n") + 1


def test_where_a_line_is_for_a_failed_load():
    scan = UsersScan()
    scan.feed(DUMP)
    scan.finish()
    assert scan.where(2) == "in the dump's header, before any database"
    assert scan.where(line_of(DUMP, b"(2,'")) == "in database `shop`"
    assert scan.where(line_of(DUMP, b"CREATE USER IF NOT EXISTS `made`")) == "in database `shop`"
    proxy = line_of(DUMP, b"GRANT PROXY ON ``@`%` TO `root`")
    assert scan.where(proxy) == "in the users section, after every database's data"
    assert scan.where() == "in the dump's trailer, after the users section"
    failed = load_failure({"id": "B1", "raw_size": 6_100_000}, "mariadb", 1,
                          f"ERROR 1698 (28000) at line {proxy}: Access denied for user "
                          "'admin'@'127.0.0.1'", 6_050_000, scan)
    assert failed == (
        f"the target refused the base B1 (mariadb exited 1): ERROR 1698 (28000) at line "
        f"{proxy}: Access denied for user 'admin'@'127.0.0.1'; the load stopped at line "
        f"{proxy} of the dump, in the users section, after every database's data (6.0 of 6.1 "
        "MB of the dump streamed), and the target holds what came before: run the same "
        "restore again (or with --users skip, to leave the accounts out; the dump's "
        "mariadb_dump_import_role may be left on the target) to load the base again from "
        "its start over it, or restore into a new empty server")
    assert "in database `shop` (" in load_failure(
        {"id": "B1", "raw_size": 10}, "mariadb", 1, "ERROR 1114 (HY000) at line 30: The "
        "table 't' is full", 5, scan)
    assert "with the stream in the dump's trailer" in load_failure(
        {"id": "B1", "raw_size": 10}, "mariadb", 1, "no error message", 5, scan)


def test_a_section_the_tool_wrote_between_its_marks():
    marked = (b"-- mysqlbackup users: begin\n" + USERS.replace(b"/*M!100203 EXECUTE", b"/*M!10 X")
              + b"-- a note of the section\n-- mysqlbackup users: end\n")
    for size in (1, 9, 4096):
        users = UsersFilter()
        assert fed(users, HEAD + marked + TAIL, size) == HEAD + TAIL
        assert users.accounts == 3 and users.needs() == NEEDS


def test_a_section_without_its_last_line_ends_at_the_trailer():
    cut = USERS[:USERS.index(b"SET ROLE NONE")]
    users = UsersFilter()
    assert fed(users, HEAD + cut + TAIL, 11) == HEAD + TAIL
    assert users.marks[-1] == (line_of(HEAD + cut + TAIL, TAIL[:20]), "tail")


def test_a_dump_without_users():
    users = UsersFilter()
    assert fed(users, HEAD + TAIL, 4) == HEAD + TAIL
    assert (users.accounts, users.needs(), users.left_out()) == (0, [], "0 accounts and 0 roles")


def test_grant_statements_read():
    assert parse_grant("GRANT SELECT (`a`, `b ON c`), INSERT ON `d`.`t TO x` TO 'u'@'%' "
                       "WITH GRANT OPTION") == (["SELECT", "INSERT"], "`d`.`t TO x`",
                                                ("u", "%"), True)
    assert parse_grant("GRANT PROXY ON ''@'%' TO 'root'@'localhost' WITH GRANT OPTION") == (
        ["PROXY"], "''@'%'", ("root", "localhost"), True)
    assert parse_grant("GRANT ALL PRIVILEGES ON *.* TO `admin`@`127.0.0.1` IDENTIFIED BY "
                       "PASSWORD '*D8' WITH GRANT OPTION")[2:] == (("admin", "127.0.0.1"), True)
    assert parse_grant("GRANT USAGE ON *.* TO `u`@`%` WITH MAX_QUERIES_PER_HOUR 5")[3] is False
    assert parse_grant("GRANT `r1` TO `app`@`10.0.0.%`") is None
    assert parse_grant("GRANT mariadb_dump_import_role TO CURRENT_USER()") is None


ADMIN = ("GRANT ALL PRIVILEGES ON *.* TO `admin`@`127.0.0.1` IDENTIFIED BY PASSWORD "
         "'*D821809F681A40A6E379B50D0463EFAE20BDD122' WITH GRANT OPTION")


def test_the_target_user_without_proxy_is_refused_naming_it():
    grants = TargetGrants("admin@127.0.0.1", [ADMIN, "GRANT `r` TO `admin`@`127.0.0.1`",
                                               "GRANT PROXY ON ''@'%' TO `r`"])
    assert not grants.has_everything()
    assert grants.missing(NEEDS) == ["PROXY"]
    assert grants.refusal(["PROXY"]) == (
        "the target user 'admin'@'127.0.0.1' lacks PROXY, which the base's accounts need "
        "(GRANT PROXY ON ''@'%' TO 'admin'@'127.0.0.1' WITH GRANT OPTION): grant it, or "
        "restore with --users skip")
    for proxy in ("GRANT PROXY ON ``@`%` TO `admin`@`127.0.0.1` WITH GRANT OPTION",
                  "GRANT PROXY ON ''@'%' TO 'admin'@'127.0.0.1' WITH GRANT OPTION"):
        assert TargetGrants("admin@127.0.0.1", [ADMIN, proxy]).has_everything()
    without_option = TargetGrants("admin@127.0.0.1", [
        ADMIN, "GRANT PROXY ON ''@'%' TO 'admin'@'127.0.0.1'"])
    assert without_option.missing(NEEDS) == ["PROXY"]


def test_a_user_with_some_privileges_lacks_the_rest():
    grants = TargetGrants("ops@%", ["GRANT SELECT, RELOAD, CREATE USER ON *.* TO `ops`@`%`",
                                    "GRANT ALL PRIVILEGES ON `shop`.* TO `ops`@`%`"])
    assert grants.missing(["CREATE USER", "GRANT OPTION", "SELECT", "UPDATE"]) == [
        "GRANT OPTION", "UPDATE"]
    assert grants.missing(NEEDS) == ["GRANT OPTION", "PROXY", "ALL PRIVILEGES"]
    assert grants.refusal(grants.missing(NEEDS)) == (
        "the target user 'ops'@'%' lacks GRANT OPTION, PROXY and ALL PRIVILEGES, which the "
        "base's accounts need (GRANT ALL PRIVILEGES ON *.* TO 'ops'@'%' WITH GRANT OPTION; "
        "GRANT PROXY ON ''@'%' TO 'ops'@'%' WITH GRANT OPTION): grant them, or restore with "
        "--users skip")
    assert grants.missing([]) == []


def test_the_plan_line_and_the_manifest_fields():
    class Plan:
        manifest = {"method": "dump", "details": {}}
    opts = RestoreOptions("file:///a")
    assert manifest_users(Plan.manifest) == (None, None)
    assert users_lines(opts, Plan) == [
        "users: apply (the base's accounts and grants; the target user's privileges for "
        "them are checked before anything is loaded)"]
    Plan.manifest = {"method": "dump", "accounts": 7, "needs": ["CREATE USER", "PROXY"],
                     "details": {}}
    assert users_lines(opts, Plan) == [
        "users: apply (the base's accounts and grants: 7 accounts, needing CREATE USER, "
        "PROXY; the target user's privileges for them are checked before anything is "
        "loaded)"]
    assert manifest_users({"details": {"accounts": 0, "needs": []}}) == (0, [])
    opts.users = "skip"
    assert users_lines(opts, Plan) == [
        "users: skip (the base's data, routines and events are loaded, its accounts and "
        "grants are not)"]
    Plan.manifest = {"method": "physical"}
    assert users_lines(opts, Plan) == []


# -- a MySQL base's section: written by base (not mysqldump), read back, left out -----------

HEX = "0x2441243030" + "41" * 65
APP = (f"CREATE USER `app`@`%` IDENTIFIED WITH 'caching_sha2_password' AS {HEX} DEFAULT ROLE "
       "`r 1`@`h``x`,`reader`@`%` REQUIRE NONE PASSWORD EXPIRE DEFAULT ACCOUNT UNLOCK PASSWORD "
       "HISTORY DEFAULT PASSWORD REUSE INTERVAL DEFAULT PASSWORD REQUIRE CURRENT DEFAULT "
       "ATTRIBUTE '{\"comment\": \"it\\'s DEFAULT ROLE `x` REQUIRE\"}'")
ROLE = ("CREATE USER `reader`@`%` IDENTIFIED WITH 'caching_sha2_password' REQUIRE NONE PASSWORD "
        "EXPIRE ACCOUNT LOCK PASSWORD HISTORY DEFAULT PASSWORD REUSE INTERVAL DEFAULT PASSWORD "
        "REQUIRE CURRENT DEFAULT")
LOCKED = (f"CREATE USER `locked`@`%` IDENTIFIED WITH 'caching_sha2_password' AS {HEX} REQUIRE "
          "NONE PASSWORD EXPIRE DEFAULT ACCOUNT LOCK PASSWORD HISTORY DEFAULT PASSWORD REUSE "
          "INTERVAL DEFAULT PASSWORD REQUIRE CURRENT DEFAULT")
MYSQL_ACCOUNTS = [
    ("`app`@`%`", APP, ["GRANT USAGE ON *.* TO `app`@`%`",
                        "GRANT INSERT, UPDATE ON `shop`.* TO `app`@`%`",
                        "GRANT SELECT (`note`) ON `shop`.`items` TO `app`@`%`",
                        "GRANT `r 1`@`h``x`,`reader`@`%` TO `app`@`%`"]),
    ("`locked`@`%`", LOCKED, ["GRANT USAGE ON *.* TO `locked`@`%`"]),
    ("`r 1`@`h``x`", ROLE.replace("`reader`@`%`", "`r 1`@`h``x`"),
     ["GRANT USAGE ON *.* TO `r 1`@`h``x`"]),
    ("`reader`@`%`", ROLE, ["GRANT USAGE ON *.* TO `reader`@`%`",
                            "GRANT SELECT ON `shop`.* TO `reader`@`%`"])]


def mysql_section_text():
    from mysqlbackup.base.users import Accounts, section
    return section(Accounts(users=MYSQL_ACCOUNTS, flavor="mysql"))


def test_a_mysql_users_section_creates_then_grants_then_sets_default_roles():
    from mysqlbackup.base.users import Accounts, section
    app = APP.replace(" DEFAULT ROLE `r 1`@`h``x`,`reader`@`%`", "")
    assert mysql_section_text().decode().splitlines() == [
        "-- mysqlbackup users: begin",
        "CREATE ROLE IF NOT EXISTS `r 1`@`h``x`;",
        "CREATE ROLE IF NOT EXISTS `reader`@`%`;",
        app.replace("CREATE USER ", "CREATE USER IF NOT EXISTS ") + ";",
        LOCKED.replace("CREATE USER ", "CREATE USER IF NOT EXISTS ") + ";",
        *[g + ";" for _, _, grants in MYSQL_ACCOUNTS for g in grants],
        "ALTER USER `app`@`%` DEFAULT ROLE `r 1`@`h``x`,`reader`@`%`;",
        "-- mysqlbackup users: end"]
    assert section(Accounts(flavor="mysql")) == b""  # no account but the reserved ones


def test_default_roles_and_the_shape_of_a_role():
    from mysqlbackup.base.users import create_statement, reserved, split_default_roles
    create, roles = split_default_roles(APP)
    assert roles == "`r 1`@`h``x`,`reader`@`%`"
    assert " DEFAULT ROLE `r 1`" not in create and create.endswith(" REQUIRE\"}'")
    assert split_default_roles(LOCKED) == (LOCKED, None)
    tail_only = LOCKED + " ATTRIBUTE '{\"comment\": \"a DEFAULT ROLE b\"}'"
    assert split_default_roles(tail_only) == (tail_only, None)  # after REQUIRE: a value
    assert create_statement("`reader`@`%`", ROLE) == "CREATE ROLE IF NOT EXISTS `reader`@`%`"
    commented = ROLE + " ATTRIBUTE '{\"comment\": \"x\"}'"
    assert create_statement("`reader`@`%`", commented) == commented.replace(
        "CREATE USER ", "CREATE USER IF NOT EXISTS ")
    assert create_statement("`locked`@`%`", LOCKED).startswith(
        "CREATE USER IF NOT EXISTS `locked`@`%` IDENTIFIED WITH 'caching_sha2_password' AS 0x")
    for user, host, locked in (("root", "localhost", False), ("mysql.sys", "LOCALHOST", False),
                               ("mysql.session", "localhost", True),
                               ("mysql.infoschema", "localhost", True),
                               ("mysql.future", "localhost", True)):
        assert reserved(user, host, locked), (user, host)
    for user, host, locked in (("root", "127.0.0.1", False), ("root", "%", False),
                               ("mysql.future", "localhost", False),
                               ("mysql.sys", "%", True), ("app", "localhost", True)):
        assert not reserved(user, host, locked), (user, host)


class FakeCursor:
    """Answers SQL as a MySQL server would (``answers``: text -> rows, or an error)."""

    def __init__(self, answers, asked):
        self.answers, self.asked, self.rows = answers, asked, ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def execute(self, sql):
        self.asked.append(sql)
        self.rows = self.answers.get(sql, ())
        if isinstance(self.rows, Exception):
            raise self.rows

    def fetchall(self):
        return self.rows


def fake_connection(answers, asked=None):
    asked = [] if asked is None else asked
    return types.SimpleNamespace(cursor=lambda: FakeCursor(answers, asked))


def test_the_mysql_survey_leaves_out_reserved_and_dropped_accounts_and_refuses_blind_users():
    import pymysql
    from mysqlbackup.base.users import survey_mysql
    from mysqlbackup.errors import SourceError
    listing = "SELECT user, host, account_locked FROM mysql.user ORDER BY user, host"
    gone = pymysql.err.OperationalError(1396, "Operation SHOW CREATE USER failed for 'gone'@'%'")
    asked = []
    conn = fake_connection({
        listing: ((b"app", b"%", b"N"), (b"gone", b"%", b"N"), (b"mysql.sys", b"localhost", b"Y"),
                  (b"root", b"localhost", b"N")),
        "SHOW CREATE USER `app`@`%`": ((APP,),), "SHOW GRANTS FOR `app`@`%`": (("GRANT X",),),
        "SHOW CREATE USER `gone`@`%`": gone}, asked)
    found = survey_mysql(conn)
    assert (found.users, found.unread) == ([("`app`@`%`", APP, ["GRANT X"])], None)
    assert asked[0] == "SET SESSION print_identified_with_as_hex = ON"
    assert not [q for q in asked if "mysql.sys" in q or "`root`" in q]

    old = fake_connection({"SET SESSION print_identified_with_as_hex = ON":
                          pymysql.err.OperationalError(1193, "Unknown system variable")})
    found = survey_mysql(old)
    assert found.users == [] and found.unread == (
        "the source cannot print password hashes as hex (print_identified_with_as_hex: MySQL "
        "8.0.17 and later)")

    denied = pymysql.err.OperationalError(1142, "SELECT command denied to user 'b'@'h' for "
                                                "table 'user'")
    with pytest.raises(SourceError) as e:
        survey_mysql(fake_connection({listing: denied}), "the source user b@h:1")
    assert str(e.value) == (
        "the source user b@h:1 may not read the mysql schema (SELECT command denied to user "
        "'b'@'h' for table 'user'), which base --method dump of a MySQL source needs: the "
        "accounts are read there, and mysqldump reads its tables (GRANT SELECT ON mysql.* TO "
        "...)")
    secret = fake_connection({listing: ((b"b", b"h", b"N"),), "SHOW CREATE USER `b`@`h`": ((
        "CREATE USER `b`@`h` IDENTIFIED WITH 'caching_sha2_password' AS <secret> REQUIRE NONE",),)})
    with pytest.raises(SourceError, match=r"\(SHOW CREATE USER hides its password hash\)"):
        survey_mysql(secret)


MYSQL_HEAD = b"""\
-- MySQL dump 10.13  Distrib 9.7.4, for Linux (x86_64)
SET @@GLOBAL.GTID_PURGED=/*!80000 '+'*/ 'u:1-5';

--
-- Current Database: `shop`
--

USE `shop`;

--
-- Table structure for table `items`
--

DROP TABLE IF EXISTS `items`;
CREATE TABLE `items` (
  `id` int NOT NULL
);
SET @@SESSION.SQL_LOG_BIN = @MYSQLDUMP_TEMP_LOG_BIN;
/*!40103 SET TIME_ZONE=@OLD_TIME_ZONE */;

-- Dump completed on 2026-11-26 12:28:29
"""


def test_a_mysql_section_left_out_and_read_for_what_it_needs():
    """No import role: a role granted needs ROLE_ADMIN of the loader (MySQL's root holds
    it, and PROXY on ''@''); left out whatever the chunks, and by a --table restore."""
    from replay.restore.dumpfilter import DumpFilter
    dump = MYSQL_HEAD + mysql_section_text()
    for size in (1, 7, 4096):
        users = UsersFilter()
        assert fed(users, dump, size) == MYSQL_HEAD
        assert users.left_out() == "2 accounts and 2 roles"
        assert users.roles == {"reader@%", "r 1@h`x"}
        assert users.needs() == ["CREATE USER", "GRANT OPTION", "INSERT", "ROLE_ADMIN",
                                 "SELECT", "UPDATE"]
    only = DumpFilter({"shop.items"})
    assert b"USER" not in only.feed(dump) + only.finish()
    scan = UsersScan()
    fed(scan, dump, 4096)
    line = line_of(dump, b"GRANT `r 1`")
    failed = load_failure({"id": "B1", "raw_size": 10, "gtid_flavor": "mysql"}, "mysql", 1,
                          f"ERROR 1227 (42000) at line {line}: Access denied; you need (at "
                          f"least one of) the ROLE_ADMIN privilege(s)", 10, scan)
    assert (f"the load stopped at line {line} of the dump, in the users section, after every "
            "database's data" in failed and "(or with --users skip, to leave the accounts "
            "out) to load" in failed and "import_role" not in failed), failed
    root = TargetGrants("root@localhost", [
        "GRANT SELECT, INSERT, UPDATE, CREATE USER ON *.* TO `root`@`localhost` WITH GRANT "
        "OPTION", "GRANT ROLE_ADMIN,SYSTEM_USER ON *.* TO `root`@`localhost` WITH GRANT OPTION",
        "GRANT PROXY ON ``@`` TO `root`@`localhost` WITH GRANT OPTION"])
    assert root.proxy and root.missing(scan.needs() + ["PROXY"]) == []
    admin = TargetGrants("admin@%", ["GRANT SELECT, INSERT, UPDATE, CREATE USER ON *.* TO "
                                     "`admin`@`%` WITH GRANT OPTION"])
    assert admin.missing(scan.needs()) == ["ROLE_ADMIN"]
