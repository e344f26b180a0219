"""The daemon's record of the primary's purge horizon (network and disk I/O): at start
and every ``localdir.horizon.RECORD_EVERY`` seconds, a short connection of its own to
the source reads its binlog files and purge settings into the directory's
``localdir.horizon.HORIZON_FILE``, which ``status``, ``check`` and the metrics read."""

import contextlib
import logging
import threading
import time

import pymysql

from mysqlbackup.localdir.horizon import PURGE_VARIABLES, RECORD_EVERY, save_record
from mysqlbackup.loop import sleep_until
from mysqlbackup.source.connect import connect

log = logging.getLogger(__name__)


def read_record(conn, clock=time.time):
    """What the primary holds now, through the PyMySQL connection ``conn``: {"files":
    [[name, size], ...], "variables": {name: value}, "recorded_at"}."""
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = [[row[0], int(row[1])] for row in cur.fetchall()]
        names = ", ".join(f"'{n}'" for n in PURGE_VARIABLES)
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
        variables = {name.lower(): value for name, value in cur.fetchall()}
    return {"files": files, "variables": variables, "recorded_at": clock()}


class HorizonRecorder:
    """Records the horizon of ``source`` (a SourceSpec) into ``directory``;
    ``record_once`` is one pass (tests drive it), ``run`` the loop."""

    def __init__(self, source, directory, interval=RECORD_EVERY, metrics=None):
        self.source, self.directory, self.interval = source, directory, interval
        self.metrics = metrics
        self.failed = False  # the last pass failed (logged once until one succeeds)
        # set once the stream runs: a source that refuses the daemon is the stream's to
        # say, once, not the recorder's too
        self.streaming = threading.Event()

    def record_once(self):
        """One record; False when the source could not be read (logged, not raised:
        the stream is what matters)."""
        try:
            conn = connect(self.source, connect_timeout=10)
            try:
                record = read_record(conn)
            finally:
                conn.close()
        except (pymysql.err.MySQLError, OSError) as e:
            if not self.failed:
                log.warning("cannot read the primary's binlog files for the purge horizon: "
                            "%s", e.args[-1] if getattr(e, "args", None) else e)
            self.failed = True
            return False
        save_record(self.directory, record)
        if self.failed:
            log.info("the primary's purge horizon is recorded again")
        self.failed = False
        if self.metrics is not None:
            self.metrics.horizon(record)
        return True

    def run(self, stop, sleep=time.sleep):
        """Once the stream runs (``streaming``), record and then every ``interval``
        seconds until ``stop()``."""
        while not stop() and not self.streaming.wait(0.1):
            pass
        while not stop():
            self.record_once()
            sleep_until(stop, self.interval, sleep)


@contextlib.contextmanager
def recorder_thread(opts, stop):
    """The recorder beside the stream (a thread of its own; never blocks the stream)."""
    recorder = HorizonRecorder(opts.source, opts.directory, metrics=opts.metrics)
    done = threading.Event()
    thread = threading.Thread(target=recorder.run, args=(lambda: done.is_set() or stop(),),
                              name="horizon", daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        done.set()
