"""The same daemon against MySQL 8.4 through testcontainers, where a Docker engine exists."""

import io
import os
import tarfile

import pytest

from tests.helpers import Daemon, read, wait_for, wait_semi_sync_source

PASSWORD = "repl-secret"


@pytest.fixture(scope="module")
def mysql84():
    docker_errors = pytest.importorskip("docker.errors", reason="docker SDK not installed")
    from testcontainers.mysql import MySqlContainer
    try:
        container = MySqlContainer("mysql:8.4", root_password="root").with_command(
            "--server-id=1 --log-bin=binlog --binlog-format=ROW --gtid-mode=ON "
            "--enforce-gtid-consistency=ON --mysql-native-password=ON")
        container.start()
    except docker_errors.DockerException as e:
        pytest.skip(f"no Docker engine reachable, MySQL 8.4 tests need one: {e}")
    yield container
    container.stop()


class MySQLServer:
    """The bits of MariaDBSandbox's interface that helpers.Daemon uses."""

    def __init__(self, container):
        import pymysql
        self.container = container
        self.host = container.get_container_host_ip()
        self.port = int(container.get_exposed_port(3306))
        self.url = f"mysql://repl@{self.host}:{self.port}"
        self.conn = pymysql.connect(host=self.host, port=self.port, user="root",
                                    password="root", autocommit=True)

    def execute(self, *statements):
        with self.conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
            return cur.fetchall()

    def status(self, name):
        rows = self.execute(f"SHOW GLOBAL STATUS LIKE '{name}'")
        return rows[0][1] if rows else None

    def fetch_binlog(self, name):
        stream, _ = self.container.get_wrapped_container().get_archive(f"/var/lib/mysql/{name}")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(name).read()


def test_semi_sync_and_identical_files_on_mysql_84(mysql84, tmp_path):
    server = MySQLServer(mysql84)
    server.execute(
        "INSTALL PLUGIN rpl_semi_sync_source SONAME 'semisync_source.so'",
        "SET GLOBAL rpl_semi_sync_source_enabled = 1",
        "SET GLOBAL rpl_semi_sync_source_timeout = 2000",
        f"CREATE USER 'repl'@'%' IDENTIFIED WITH mysql_native_password BY '{PASSWORD}'",
        "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT ON *.* TO 'repl'@'%'",
        "CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
    start = server.execute("SHOW BINARY LOG STATUS")[0][0]
    daemon = Daemon(server, tmp_path / "dir", "--start-file", start, password=PASSWORD).start()
    try:
        wait_semi_sync_source(server)
        yes0 = int(server.status("Rpl_semi_sync_source_yes_tx"))
        for i in range(100):
            server.execute(f"INSERT INTO d.t (v) VALUES ({i})")
        assert int(server.status("Rpl_semi_sync_source_yes_tx")) - yes0 == 100
        server.execute("FLUSH BINARY LOGS")
        wait_for(lambda: os.path.exists(tmp_path / "dir" / server.execute(
            "SHOW BINARY LOG STATUS")[0][0]), what="rotation")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert read(tmp_path / "dir" / start) == server.fetch_binlog(start)
