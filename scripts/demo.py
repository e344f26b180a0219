"""The demo behind scripts/demo.sh (run that instead: it sets up the machine first)."""

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time

from mysqlbackup.sandbox import REPL_PASSWORD, MariaDBSandbox


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise SystemExit("demo: timed out")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", help="backup directory (default: a new temp dir)")
    parser.add_argument("--transactions", type=int, default=1000)
    args = parser.parse_args()
    directory = args.dir or tempfile.mkdtemp(prefix="mysqlbackup-demo-")
    env = dict(os.environ, MYSQLBACKUP_PASSWORD=REPL_PASSWORD)
    with MariaDBSandbox() as server:
        print(f"demo: MariaDB primary on 127.0.0.1:{server.port}, backup into {directory}")
        daemon = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "stream", "--source",
                                   server.url, "--server-id", "100", "--dir", directory], env=env)
        try:
            run_workload(server, args.transactions)
            subprocess.run([sys.executable, "-m", "mysqlbackup", "status", "--dir", directory],
                           check=True)
        finally:
            daemon.terminate()
            daemon.wait(30)
        compare(server, directory)


def run_workload(server, count):
    wait_for(lambda: server.status("Rpl_semi_sync_master_clients") == "1")
    server.execute("CREATE DATABASE shop", "CREATE TABLE shop.orders (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, item VARCHAR(40), qty INT)")
    yes0 = int(server.status("Rpl_semi_sync_master_yes_tx"))
    conn = server.root()
    start = time.monotonic()
    with conn.cursor() as cur:
        for i in range(count):
            cur.execute("INSERT INTO shop.orders (item, qty) VALUES (%s, %s)", (f"item{i}", i))
    elapsed = time.monotonic() - start
    conn.close()
    yes = int(server.status("Rpl_semi_sync_master_yes_tx")) - yes0
    print(f"demo: {count} transactions in {elapsed:.2f}s, {yes} acknowledged by the backup "
          f"after fsync (semi-sync yes_tx)")
    server.execute("FLUSH BINARY LOGS")
    time.sleep(1.5)


def compare(server, directory):
    files = server.binlog_files()[:-1]
    same = [f for f in files if filecmp.cmp(os.path.join(directory, f), server.binlog_path(f),
                                            shallow=False)]
    print(f"demo: {len(same)}/{len(files)} closed binlog files byte-identical to the server's")
    if len(same) != len(files):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
