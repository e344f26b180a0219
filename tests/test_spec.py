"""Server URLs (--source, --target): parsed, or refused in one line naming the URL (pure)."""

import pytest

from mysqlbackup.errors import UsageError
from mysqlbackup.source.spec import parse_source_url


def test_a_url_gives_user_host_and_port():
    assert parse_source_url("mysql://repl@db1:3307") == ("repl", "db1", 3307)
    assert parse_source_url("mariadb://a%40b@10.0.0.2") == ("a@b", "10.0.0.2", 3306)


@pytest.mark.parametrize("url, message", [
    ("http://repl@db1", "bad server URL 'http://***@db1': expected mysql://USER@HOST:PORT"),
    ("mysql://db1:3306", "bad server URL 'mysql://db1:3306': the user is missing "
                         "(mysql://USER@HOST:PORT)"),
    ("mysql://repl@db1:x", "bad port in server URL 'mysql://repl@db1:x': a number from 1 to "
                           "65535 (default 3306)"),
    ("mysql://repl@db1:0", "bad port in server URL 'mysql://repl@db1:0': a number from 1 to "
                           "65535 (default 3306)"),
    ("mysql://repl@db1:70000", "bad port in server URL 'mysql://repl@db1:70000': a number "
                               "from 1 to 65535 (default 3306)"),
    ("mysql://repl:secret@db1", "do not put the password in the URL: use the "
                                "MYSQLBACKUP_PASSWORD environment variable or --password-file"),
])
def test_bad_urls_are_refused_in_one_line(url, message):
    with pytest.raises(UsageError) as e:
        parse_source_url(url)
    assert str(e.value) == message
