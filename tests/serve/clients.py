"""The binlog clients of the serve tests, each run the same way against ``serve`` and
against the live primary of the same archive: the engine's own reader
(``mariadb-binlog``/``mysqlbinlog --read-from-remote-server``), python-mysql-replication
and zongji (Node), their output made comparable."""

import json
import os
import shutil
import subprocess
from dataclasses import dataclass

from tests.helpers import REPO

ZONGJI_DIR = os.path.join(REPO, ".node")   # scripts/setup.sh installs @vlasky/zongji here


@dataclass
class Endpoint:
    """Where a client connects: host, port, user, password."""

    host: str
    port: int
    user: str
    password: str

    @classmethod
    def of_server(cls, server):
        user, password = server.admin
        return cls("127.0.0.1", server.port, user, password)

    @classmethod
    def of_serve(cls, handle, user, password):
        return cls(handle.host, handle.port, user, password)


def remote_args(tool, at, *extra):
    """``tool --read-from-remote-server`` against ``at``."""
    return [tool, "--read-from-remote-server", f"--host={at.host}", f"--port={at.port}",
            f"--user={at.user}", *([f"--password={at.password}"] if at.password else []),
            *extra]


def read_raw(tool, at, first, directory, env=None, timeout=60, follow=False):
    """``tool --raw --to-last-log`` (``follow``: ``--stop-never`` too, and the process
    returned running) from ``first`` into ``directory``; {name: bytes} of the files it
    wrote. The tool must end by itself within ``timeout`` unless following."""
    os.makedirs(directory, exist_ok=True)
    args = remote_args(tool, at, "--raw", "--to-last-log",
                       f"--result-file={os.path.join(str(directory), '')}",
                       *(["--stop-never"] if follow else []), first)
    if follow:
        return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env)
    done = subprocess.run(args, capture_output=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return files_in(directory)


def files_in(directory):
    """{name: bytes} of the files in ``directory``."""
    return {n: open(os.path.join(str(directory), n), "rb").read()
            for n in sorted(os.listdir(str(directory)))}


def read_decoded(tool, at, first, local_load, env=None, timeout=60):
    """``tool -v --base64-output=decode-rows --to-last-log`` from ``first``: its text, the
    place of LOAD DATA's files (``local_load``) written as LOCAL_LOAD."""
    os.makedirs(local_load, exist_ok=True)
    args = remote_args(tool, at, "-v", "--base64-output=decode-rows", "--to-last-log",
                       f"--local-load={local_load}", first)
    done = subprocess.run(args, capture_output=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout.decode(errors="replace").replace(str(local_load), "LOCAL_LOAD")


def without_in_use(data):
    """A binlog file's bytes as a server sends them: its format description's in-use
    flag clear (the primary's active file has it set on disk; a dump clears it)."""
    out = bytearray(data)
    out[4 + 17] &= 0xFE
    return bytes(out)


# -- python-mysql-replication ---------------------------------------------------------

def pmr_rows(at, mariadb, blocking=False, limit=None, **where):
    """The row changes python-mysql-replication reads from ``at``: [(kind, schema, table,
    values)] (values: {column: value}, an update's before and after), from ``where``
    (``log_file``/``log_pos`` or ``auto_position``); ``blocking=False``: it must end by
    itself; else reading stops after ``limit`` changes."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import (DeleteRowsEvent, UpdateRowsEvent,
                                              WriteRowsEvent)
    kinds = {WriteRowsEvent: "insert", UpdateRowsEvent: "update", DeleteRowsEvent: "delete"}
    stream = BinLogStreamReader(
        connection_settings=dict(host=at.host, port=at.port, user=at.user,
                                 password=at.password, connect_timeout=10, read_timeout=30),
        server_id=4242, blocking=blocking, is_mariadb=mariadb, resume_stream=True,
        only_events=list(kinds), **where)
    out = []
    try:
        for event in stream:
            for row in event.rows:
                values = row.get("values") or {"before": row["before_values"],
                                               "after": row["after_values"]}
                out.append((kinds[type(event)], event.schema, event.table, values))
            if limit is not None and len(out) >= limit:
                break
    finally:
        stream.close()
    return out


# -- zongji (Node) ----------------------------------------------------------------------

ZONGJI_SCRIPT = r"""
import ZongJi from '@vlasky/zongji';
const [host, port, user, password, limit] = process.argv.slice(2);
// mysql2 3.26 asks for this to fetch the RSA key of caching_sha2_password's exchange
// over clear text, against serve as against mysqld (a user opts in the same way)
const z = new ZongJi({host, port: Number(port), user, password, allowPublicKeyRetrieval: true});
let seen = 0;
const out = [];
z.on('binlog', ev => {
  const kind = {writerows: 'insert', updaterows: 'update', deleterows: 'delete'}[ev.getEventName()];
  if (!kind) return;
  for (const row of ev.rows) {
    out.push([kind, ev.tableMap[ev.tableId].parentSchema, ev.tableMap[ev.tableId].tableName, row]);
    seen++;
  }
  if (seen >= Number(limit)) { console.log(JSON.stringify(out)); z.stop(); }
});
z.on('error', e => { console.error(String(e)); process.exit(2); });
z.start({startAtEnd: false, includeEvents: ['tablemap', 'writerows', 'updaterows', 'deleterows']});
"""


def why_no_zongji():
    """Why zongji cannot run here (None: it can)."""
    if shutil.which("node") is None:
        return "node is not installed (zongji is a Node client)"
    if not os.path.isdir(os.path.join(ZONGJI_DIR, "node_modules", "@vlasky", "zongji")):
        return (f"@vlasky/zongji is not installed in {ZONGJI_DIR} (scripts/setup.sh installs "
                "it where npm exists)")
    return None


def zongji_rows(at, limit, timeout=60):
    """The first ``limit`` row changes zongji reads from ``at`` (from the first file):
    [(kind, schema, table, values)] as JSON gives them."""
    script = os.path.join(ZONGJI_DIR, "read-rows.mjs")  # beside its node_modules
    with open(script, "w", encoding="utf-8") as f:
        f.write(ZONGJI_SCRIPT)
    done = subprocess.run(["node", script, at.host, str(at.port), at.user, at.password,
                           str(limit)], capture_output=True, timeout=timeout)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return [tuple(r) for r in json.loads(done.stdout)]
