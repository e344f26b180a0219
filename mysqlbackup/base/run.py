"""``take_base``: one base backup of a source into the archive, manifest last."""

import contextlib
import functools
import logging
import tempfile
import time
from dataclasses import asdict

from mysqlbackup import __version__
from mysqlbackup.archive.manifest import (METHODS, build_manifest,
                                          format_manifest)
from mysqlbackup.archive.names import (BASE_MEMBERS, base_key, base_prefix,
                                       check_source_name, format_base_id,
                                       format_key)
from mysqlbackup.base import dump, physical, server, users
from mysqlbackup.base.clone import start_clone
from mysqlbackup.base.client import ToolProcess, find_client, find_tool, options_file
from mysqlbackup.base.userscan import UsersScan
from mysqlbackup.base.upload import (BASE_CODEC, Progress, check_stored, remove_quietly,
                                     upload_stream)
from mysqlbackup.binlog.gtid import parse_gtid_set
from mysqlbackup.errors import UsageError
from mysqlbackup.utc import iso

log = logging.getLogger(__name__)


class _Run:
    """The tool of one method, running: its process and its snapshot parser."""

    def __init__(self, process, parser, observe, details, tail=b""):
        self.process, self.parser, self.observe = process, parser, observe
        self.details, self.tail = details, tail
        self.users = None   # a dump's UsersScan: its accounts and what they need

    def read(self, size=-1):
        """The tool's output, then ``tail`` (the accounts' section we write)."""
        data = self.process.stdout.read(size)
        if data or not self.tail:
            return data
        data, self.tail = self.tail, b""
        return data


@contextlib.contextmanager
def _start_dump(spec, facts):
    tool, version = find_client(dump.CLIENTS[facts.flavor], facts.flavor)
    parser = dump.SnapshotParser(facts.flavor, facts.gtids)
    accounts = _accounts(spec, facts.flavor)
    skip = _system_tables(spec) if facts.flavor == "mysql" else ()
    # we write the accounts: MySQL's always (users.py says why); MariaDB's when the
    # source ignores some (mariadb-dump would fail on them)
    ours = facts.flavor == "mysql" or bool(accounts.ignored)
    scan = UsersScan()  # what the dump's accounts will need of the user who loads them

    def observe(chunk):
        parser.feed(chunk)
        scan.feed(chunk)

    with options_file(spec, flavor=facts.flavor) as options:
        argv = dump.dump_argv(tool, options, spec, facts.flavor, users=not ours,
                              skip_tables=skip, gtids=facts.gtids)
        process = ToolProcess(argv)
        details = {"tool": tool, "tool_version": version, "arguments": argv[2:]}
        if accounts.ignored:
            details.update(skipped_accounts=accounts.ignored)
        if accounts.unread:
            details.update(accounts_unread=accounts.unread)
        run = _Run(process, parser, observe, details, users.section(accounts) if ours else b"")
        run.users = scan
        try:
            yield run
        finally:
            process.kill()


def _system_tables(spec):
    """The tables of MySQL's mysql schema, which its mysqldump is told to leave out."""
    conn = server.connect(spec)
    try:
        return server.schema_tables(conn, dump.SYSTEM_SCHEMAS[0])
    finally:
        conn.close()


def _accounts(spec, flavor):
    """The source's accounts (``users.survey``, MySQL's ``users.survey_mysql``: SourceError
    when the user may not read them); a warning names those it ignores, or says why none
    could be read."""
    conn = server.connect(spec)
    try:
        found = (users.survey_mysql(conn, f"the source user {spec.user}@{spec.address}")
                 if flavor == "mysql" else users.survey(conn))
    finally:
        conn.close()
    if found.ignored:
        log.warning("base: %d account(s) the source ignores (skip_name_resolve: a host that is "
                    "a name) left out of the base: %s", len(found.ignored),
                    ", ".join(found.ignored))
    if found.unread:
        log.warning("base: the accounts are left out of the base: %s", found.unread)
    return found


@contextlib.contextmanager
def _start_physical(spec, facts):
    if facts.flavor != "mariadb":
        raise UsageError("base --method physical needs a MariaDB source (mariadb-backup); "
                         "use --method clone (or dump) for MySQL")
    tool = find_tool(physical.TOOLS)
    parser = physical.StderrSnapshot()
    with options_file(spec, ("client", "mariadb-backup")) as options, \
            tempfile.TemporaryDirectory(prefix="mysqlbackup-physical-") as scratch:
        argv = physical.backup_argv(tool, options, spec, scratch)
        process = ToolProcess(argv, on_stderr=parser.feed_line)
        try:
            yield _Run(process, parser, None, {"tool": tool, "arguments": argv[2:]})
        finally:
            process.kill()


STARTERS = {"dump": _start_dump, "physical": _start_physical, "clone": start_clone}


def take_base(spec, store, source_name=None, method="dump", report=None, codec=BASE_CODEC,
              clone_dir=None):
    """Back up the source ``spec`` into ``store``; return the manifest written.

    The object goes under ``SOURCE/base/ID/`` (SOURCE: ``source_name``, else the
    source's server_uuid or ``server-id-N`` as the daemon names it; ID: the source's
    clock when the backup started), its manifest last, only after the object was
    read back and matched. ``report(raw, stored)`` gets progress now and then.
    ``codec`` (archive.codec.Codec): zstd at its level, encrypted to its recipients.
    ``clone_dir``: where ``clone`` makes its copy (a fresh folder under it; default
    the TMPDIR), a path the source server and this command share (one host).
    Raises SourceError (unreachable, privileges), ToolError (tool missing or
    failed), DumpError (no position in the output), StoreError (the archive);
    none of them leaves a manifest."""
    if method not in METHODS:
        raise UsageError(f"unknown base method {method!r}: choose {' or '.join(METHODS)}")
    if codec.compression != "zstd":
        raise UsageError("base backups are always compressed: --compress zstd[:LEVEL]")
    facts, start = _prepare(spec, method)
    source = check_source_name(source_name or facts.identity)
    base_id = format_base_id(start)
    member = format_key(base_key(source, base_id, BASE_MEMBERS[method]))
    index = format_key(base_key(source, base_id))
    if store.exists(index):
        raise UsageError(f"base {base_id} of {source} already exists in {store.url}")
    began = time.monotonic()
    starter = STARTERS[method]
    if method == "clone":
        starter = functools.partial(start_clone, parent=clone_dir)
    with _nothing_left(store, base_prefix(source, base_id)):
        with starter(spec, facts) as run:
            finished = {}

            def before_commit():
                run.process.finish()
                where = f"{run.process.name} of {source}"
                finished["snapshot"] = run.parser.snapshot(where, run.process.said())
                finished["end"] = _after(spec, facts, finished["snapshot"], where)

            uploaded = upload_stream(run.read, store, member, run.observe,
                                     before_commit, Progress(report), codec)
            if run.users is not None:  # restore --users apply reads these, not the base
                run.users.finish()
                run.details.update(accounts=run.users.accounts, needs=run.users.needs())
            check_stored(store, member, uploaded)  # clone: its copy goes only after this
        manifest = _manifest(facts, source, base_id, method, start, finished, uploaded,
                             dict(run.details, elapsed=round(time.monotonic() - began, 3)),
                             codec, store.lock)
        try:
            store.put_bytes(index, format_manifest(manifest))
        except BaseException:
            remove_quietly(store, member)  # no manifest: the object must not linger either
            raise
    return manifest


@contextlib.contextmanager
def _nothing_left(store, folder):
    """On an error, the base's ``folder`` goes too (file://: ``open_write`` made it;
    the object in it was never published, or was removed again)."""
    try:
        yield
    except BaseException:
        store.remove_empty_folder(folder)
        raise


def _prepare(spec, method):
    """The source's facts and its clock at the start, after the privilege check."""
    conn = server.connect(spec)
    try:
        facts = server.read_facts(conn)
        if method == "clone" and facts.flavor != "mysql":
            raise UsageError("base --method clone needs a MySQL source (its clone plugin); "
                             "for MariaDB use --method physical (mariadb-backup) or dump")
        server.check_privileges(conn, f"{spec.user}@{spec.address}", method, facts.flavor)
        return facts, server.source_now(conn)
    finally:
        conn.close()


def _after(spec, facts, snapshot, where):
    """The source's clock once the tool has finished; the snapshot's GTID must be what
    the server says its binlog position stands for (MariaDB: BINLOG_GTID_POS; MySQL:
    its binlog read up to there, ``server.mysql_gtid_at``), else DumpError: a misread
    position would start a restore at the wrong place."""
    conn = server.connect(spec)
    try:
        if facts.flavor == "mariadb":
            check_gtid(snapshot, server.binlog_gtid_pos(conn, snapshot.position), where)
        elif facts.flavor == "mysql" and facts.gtids:
            expected, why_not = server.mysql_gtid_at(conn, snapshot.position)
            if why_not:
                log.warning("base: the GTID set at %s is not checked against the binlog: "
                            "%s", snapshot.position, why_not)
            check_gtid(snapshot, expected, where, "mysql")
        return server.source_now(conn)
    finally:
        conn.close()


def check_gtid(snapshot, expected, where, flavor="mariadb"):
    """DumpError unless ``snapshot``'s GTID is ``expected`` (None: the server cannot
    tell, its binlog file is gone already: nothing to compare)."""
    if expected is None:
        return
    if parse_gtid_set(snapshot.gtid, flavor) != parse_gtid_set(expected, flavor):
        says = ("BINLOG_GTID_POS there is" if flavor == "mariadb"
                else "its binlog there follows the GTID set")
        raise dump.DumpError(f"{where}: GTID {gtid_text(snapshot, flavor)!r} at "
                             f"{snapshot.position}, but the source says {says} "
                             f"{expected!r}")


def gtid_text(snapshot, flavor):
    """The snapshot's GTID as the manifest holds it: MySQL's set on one line (mysqldump
    writes one uuid a line), as MySQL prints it; MariaDB's as the dump says it; None for
    a source without GTIDs."""
    if flavor != "mysql" or snapshot.gtid is None:
        return snapshot.gtid
    return str(parse_gtid_set(snapshot.gtid, flavor))


def _manifest(facts, source, base_id, method, start, finished, uploaded, details, codec,
              lock=None):
    snapshot = finished["snapshot"]
    locked = {"lock": asdict(lock)} if lock else {}  # the S3 Object Lock it is written under
    return build_manifest(**locked,
        id=base_id, source=source, method=method, member=BASE_MEMBERS[method],
        compression="zstd", start_time=iso(start, 6),
        end_time=iso(finished["end"], 6), gtid=gtid_text(snapshot, facts.flavor),
        gtid_flavor=facts.flavor, binlog_file=snapshot.position.file,
        binlog_pos=snapshot.position.offset, server_uuid=facts.server_uuid,
        server_id=facts.server_id, server_version=facts.version,
        raw_size=uploaded.raw_size, stored_size=uploaded.stored_size,
        sha256=uploaded.sha256, raw_sha256=uploaded.raw_sha256, tool_version=__version__,
        details=details, codec=codec.name, key_ids=codec.key_ids)
