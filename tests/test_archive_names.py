"""Archive object names: every builder is paired with parse_key (pure, no store)."""

import pytest

from mysqlbackup.archive.names import (ArchiveKey, binlog_key, binlog_prefix, check_source_name,
                                       format_key, parse_key, partial_prefix, segment_key)
from mysqlbackup.errors import UsageError


def test_sealed_names_round_trip_under_the_binlog_prefix():
    data = format_key(binlog_key("srv-1", "mariadb-bin.000007"))
    index = format_key(binlog_key("srv-1", "mariadb-bin.000007", index=True))
    assert data == "srv-1/binlog/mariadb-bin.000007"
    assert index == data + ".json"
    assert data.startswith(binlog_prefix("srv-1") + "/")
    assert parse_key(data) == ArchiveKey("srv-1", "binlog", "mariadb-bin.000007")
    assert parse_key(index) == ArchiveKey("srv-1", "binlog", "mariadb-bin.000007", True)


def test_segment_names_round_trip_under_the_partial_prefix():
    key = segment_key("srv-1", "mariadb-bin.000008", 4, 12345, index=True)
    name = format_key(key)
    assert name == "srv-1/partial/mariadb-bin.000008/000000000004-000000012345.json"
    assert partial_prefix("srv-1", "mariadb-bin.000008") == "srv-1/partial/mariadb-bin.000008"
    assert name.startswith(partial_prefix("srv-1", "mariadb-bin.000008") + "/")
    assert parse_key(name) == key


@pytest.mark.parametrize("relative", [
    "srv-1/binlog/mariadb-bin.000007.tmp-deadbeef",      # an upload in progress
    "srv-1/binlog/notes.txt",                            # not a binlog name
    "srv-1/partial/mariadb-bin.000008/4-12345",          # bounds not zero-padded
    "srv-1/other/mariadb-bin.000007",
    "mariadb-bin.000007",
])
def test_names_that_are_not_ours_parse_to_none(relative):
    assert parse_key(relative) is None


def test_source_names_must_be_one_path_component():
    assert check_source_name("server-id-3") == "server-id-3"
    for bad in ("", "a/b", "../x", None):
        with pytest.raises(UsageError):
            check_source_name(bad)
