"""The fidelity suite's source and its ways (the test modules ``test_fidelity*.py``
share them): a source streamed by the daemon from its first binlog, a dump base after
the schema, the workload's sections with a checkpoint after each, then each way of
the tool, and the engine's own pipe, restored into fresh servers checkpoint after
checkpoint."""

import os
from dataclasses import dataclass

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog.gtid import parse_gtid_set, parse_one
from tests.fidelity import base_dump, fingerprint
from tests.helpers import (Daemon, caught_up, current_binlog, run_cli, wait_archived_to_the_end,
                           wait_for)
from tests.workload import SECTIONS, Sessions, schema

SOURCE = "db1"


@dataclass
class Checkpoint:
    """The source at the end of a section: its GTID state, binlog file and offset, the
    GTID of the transaction that comes next (None at the end) and its Fingerprint."""

    name: str
    gtids: str
    file: str
    pos: int
    stop_gtid: str
    print: object


@dataclass
class Mark:
    """A point of a section (``("mark", name)``): the GTID that comes next, and the rows
    of ``f.types`` then, in the change table's encoding."""

    stop_gtid: str
    types: list


class Source:
    """A source that ran the workload, archived, with its base and checkpoints."""

    def __init__(self, server, flavor, root, tools):
        self.server, self.flavor, self.root, self.tools = server, flavor, root, tools
        self.url = f"file://{root / 'archive'}"
        self.store = ArchiveStore(self.url)
        self.checkpoints, self.manifest, self.marks = [], None, {}

    def run(self):
        """Schema, base, sections; the daemon streams it all from the first file."""
        server = self.server
        daemon = Daemon(server, self.root / "backup", "--start-file", server.binlog_files()[0],
                        "--archive", self.url, "--archive-interval", "0.2",
                        "--source-name", SOURCE).start()
        sessions = Sessions(server)
        try:
            daemon.wait_streaming()
            server.execute(*schema(self.flavor))
            user, password = server.admin
            base = run_cli("base", "--source", f"mysql://{user}@127.0.0.1:{server.port}",
                           "--archive", self.url, "--source-name", SOURCE, password=password,
                           timeout=120, path=self.tools.path)
            assert base.returncode == 0, base.stdout + base.stderr
            [self.manifest] = ArchiveListing(self.store).sound_manifests(SOURCE)
            for i, (name, section) in enumerate(SECTIONS):
                for step in section(self.flavor):
                    if step[0] == "mark":
                        self.marks[step[1]] = self._mark()
                        continue
                    sessions.run(step)
                sessions.wait_closed()
                self.checkpoints.append(self._checkpoint(name, i == len(SECTIONS) - 1))
            wait_for(lambda: caught_up(server, self.root / "backup"), what="caught up")
            wait_archived_to_the_end(server, self.store, SOURCE)
        finally:
            sessions.close()
            assert daemon.stop() == 0, daemon.output()[-3000:]
        return self

    def _checkpoint(self, name, last):
        server = self.server
        key = "gtid_executed" if self.flavor == "mysql" else "gtid_binlog_pos"
        gtids = server.execute(f"SELECT @@GLOBAL.{key}")[0][0].replace("\n", "")
        file = current_binlog(server)
        pos = os.path.getsize(server.binlog_path(file))
        return Checkpoint(name, gtids, file, pos, None if last else self._next(gtids),
                          fingerprint(server, self.flavor))

    def _mark(self):
        from tests.fidelity_parquet import source_images
        key = "gtid_executed" if self.flavor == "mysql" else "gtid_binlog_pos"
        gtids = self.server.execute(f"SELECT @@GLOBAL.{key}")[0][0].replace("\n", "")
        return Mark(self._next(gtids), source_images(self.server, "f", "types"))

    def _next(self, gtids):
        """The GTID the next transaction of the source's own sessions will take."""
        state = parse_gtid_set(gtids, self.flavor)
        if self.flavor == "mysql":
            uuid = self.server.execute("SELECT @@server_uuid")[0][0]
            return f"{uuid}:{state.sids[uuid][-1][1]}"  # intervals are half-open
        _, seq = state.domains[0]
        return f"0-1-{seq + 1}"

    def files_between(self, first, last):
        """The source's binlog files ``first`` to ``last`` as the binlog reader finds them
        (MySQL's runs in the tree, through chroot: the path there)."""
        names = self.server.binlog_files()
        where = getattr(self.server, "inside", None)
        return [where(f"data/{n}") if where else self.server.binlog_path(n)
                for n in names[names.index(first):names.index(last) + 1]]

    def load_base(self, target, *client_args):
        """The base's dump loaded with the engine's own client (the pipe's start)."""
        path = self.root / f"base-{target.port}.sql"
        self.tools.load(target, base_dump(self.store, SOURCE, self.manifest, path),
                        *client_args)
        os.unlink(path)

    def pipe_to(self, target, previous, checkpoint):
        """The engine's own pipe from ``previous`` (a Checkpoint, None: the base) to
        ``checkpoint``."""
        if previous is None:
            first, start = self.manifest["binlog_file"], self.manifest["binlog_pos"]
        else:
            first, start = previous.file, previous.pos
        self.tools.pipe(target, self.files_between(first, checkpoint.file), start,
                        checkpoint.pos)

    def gtids_to(self, checkpoint):
        """The GTIDs the source logged after its base through ``checkpoint``, in order:
        what a target's binlog holds once restored by statements to there (but, on
        MariaDB, those of transactions on temporary tables only:
        ``fidelity.TEMPORARY_ONLY``)."""
        from tests.fidelity import logged_gtids
        flavor = self.flavor
        base, end = (parse_gtid_set(t, flavor) for t in (self.manifest["gtid"],
                                                          checkpoint.gtids))
        out = []
        for text, temporary in logged_gtids(self.server, groups=True):
            if temporary and flavor == "mariadb":
                continue
            key = parse_one(text)
            key = key if flavor == "mysql" else (key[0], key[2])
            holds = (lambda s: s.contains(*key)) if flavor == "mysql" else \
                (lambda s: s.contains(key[0], 0, key[1]))
            if holds(end) and not holds(base):
                out.append(text)
        return out

    def stop_args(self, point):
        """The replay's stop option for a Checkpoint or Mark (none at the end)."""
        return ["--stop-before-gtid", point.stop_gtid] if point.stop_gtid else []

    def restore(self, target, checkpoint, *extra):
        """``mysqlbackup restore`` into ``target`` to ``checkpoint``."""
        user, password = target.admin
        done = run_cli("restore", "--archive", self.url, "--source-name", SOURCE,
                       "--target", f"mysql://{user}@127.0.0.1:{target.port}",
                       *self.stop_args(checkpoint), *extra, password=password, timeout=300,
                       path=self.tools.path)
        return done

    def replay_sql(self, target, previous, checkpoint, name):
        """``replay --sql`` from ``previous`` (the base when None) to ``checkpoint``,
        loaded with the engine's own client. MySQL's client runs in its tree (chroot):
        the file, and the LOAD DATA files beside it, are written in the target's folder
        there and named by their path inside."""
        start = previous.gtids if previous is not None else self.manifest["gtid"]
        path = os.path.join(target.basedir, name)
        done = run_cli("replay", "--archive", self.url, "--source-name", SOURCE,
                       "--start-gtid", start, *self.stop_args(checkpoint), "--sql", path,
                       "--engine", "spark", password="", timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        tree = getattr(target, "tree", None)
        if tree:
            with open(path, "rb") as f:
                text = f.read().replace(os.path.abspath(tree).encode(), b"")
            with open(path, "wb") as f:
                f.write(text)
        self.tools.load(target, path)


# -- what every fidelity module asserts ----------------------------------------------------

# each way of the tool: the target server's settings and the restore's arguments; a
# target with a binlog (a restored primary: the source's GTIDs logged there, MariaDB's
# gtid_strict_mode on) for every way, and one without (the merged commits of the
# statements way). replay --target is check_replay_target's.
WAYS = {
    "native": dict(server=dict(), args=()),
    "statements-local-binlog": dict(server=dict(), args=("--apply", "statements",
                                                         "--engine", "local")),
    "statements-spark-binlog": dict(server=dict(), args=("--apply", "statements",
                                                         "--engine", "spark")),
    "statements-local-nobinlog": dict(server=dict(log_bin=False),
                                      args=("--apply", "statements", "--engine", "local")),
}


def pipe_prints(source, target):
    """The engine's own pipe's Fingerprint at each checkpoint: the base into ``target``,
    then the pipe from each checkpoint to the next."""
    source.load_base(target)
    prints, previous = [], None
    for checkpoint in source.checkpoints:
        source.pipe_to(target, previous, checkpoint)
        prints.append(fingerprint(target, source.flavor))
        previous = checkpoint
    return prints


def check_pipe_gives_the_source(source, pipe):
    """The pipe's data is the source's at every checkpoint (floats compared as floats,
    AUTO_INCREMENT counters and the engine's masked columns aside)."""
    from tests.fidelity import float_columns, masked_columns
    for checkpoint, got in zip(source.checkpoints, pipe):
        want = checkpoint.print
        assert got.differences(want, float_columns(want), ignore_auto_increment=True,
                               masked=masked_columns(source.flavor)) == [], checkpoint.name


def check_way(source, pipe, server, way):
    """A restore by ``way`` into ``server`` gives the pipe's data at every checkpoint,
    and the source's GTID state then (MariaDB's gtid_current_pos, MySQL's
    gtid_executed): what a replica of the restored server starts from; a target with a
    binlog restored by statements logs each of the source's GTIDs since the base once,
    in order (what a replica replaying it gets)."""
    from tests.fidelity import gtid_now, logged_gtids
    for checkpoint, want in zip(source.checkpoints, pipe):
        done = source.restore(server, checkpoint, *WAYS[way]["args"])
        assert done.returncode == 0, done.stdout + done.stderr
        got = fingerprint(server, source.flavor)
        assert got.differences(want) == [], (checkpoint.name, done.stdout + done.stderr)
        assert gtid_now(got, source.flavor) == checkpoint.gtids, (checkpoint.name, got.gtid)
        if server.log_bin and way != "native":  # (the applier's logs only with
            # log_slave_updates): each source GTID once, in order, none of its own
            _same_gtids(logged_gtids(server), source.gtids_to(checkpoint), checkpoint.name)


def check_replay_target(source, pipe, server):
    """``replay --target`` (Spark) into ``server`` (a binlog, MariaDB's strict mode),
    after the base loaded unlogged with the engine's client: the pipe's data and the
    source's GTID state at every checkpoint, each source GTID since the base in its
    binlog once."""
    from tests.fidelity import gtid_now, logged_gtids
    source.load_base(server, "--init-command=SET SESSION sql_log_bin=0")
    user, password = server.admin
    for checkpoint, want in zip(source.checkpoints, pipe):
        done = run_cli("replay", "--archive", source.url, "--source-name", SOURCE,
                       "--start-gtid", source.manifest["gtid"], *source.stop_args(checkpoint),
                       "--target", f"mysql://{user}@127.0.0.1:{server.port}",
                       "--engine", "spark", password=password, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        got = fingerprint(server, source.flavor)
        assert got.differences(want) == [], (checkpoint.name, done.stdout + done.stderr)
        assert gtid_now(got, source.flavor) == checkpoint.gtids, (checkpoint.name, got.gtid)
        _same_gtids(logged_gtids(server), source.gtids_to(checkpoint), checkpoint.name)


def _same_gtids(logged, wanted, name):
    """The target logged exactly ``wanted``, in order (a readable difference)."""
    missing = [g for g in wanted if g not in logged]
    extra = [g for g in logged if g not in wanted]
    twice = sorted({g for g in logged if logged.count(g) > 1})
    first = next((i for i, (a, b) in enumerate(zip(logged, wanted)) if a != b), None)
    assert logged == wanted, (name, first, logged[first - 2:first + 3] if first else None,
                              wanted[first - 2:first + 3] if first else None,
                              f"missing {missing[:10]}", f"not the source's or "
                              f"after the checkpoint {extra[:10]}", f"twice {twice[:10]}")


def check_replay_sql(source, pipe, server):
    """``replay --sql`` files loaded with the engine's client give the pipe's data."""
    source.load_base(server)
    previous = None
    for i, (checkpoint, want) in enumerate(zip(source.checkpoints, pipe)):
        source.replay_sql(server, previous, checkpoint, f"replay-{i}.sql")
        assert fingerprint(server, source.flavor).differences(want) == [], checkpoint.name
        previous = checkpoint
