"""mysqlbackup: durable, byte-identical MySQL/MariaDB binlog backup."""

__version__ = "0.1.0"
