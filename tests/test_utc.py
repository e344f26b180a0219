"""The one text of a moment (``mysqlbackup.utc``)."""

from mysqlbackup.utc import epoch, iso


def test_one_text_of_a_moment():
    assert iso(1795466396.1234567) == "2026-11-23T20:39:56Z"
    assert iso(1795466396.1234567, 3) == "2026-11-23T20:39:56.123Z"
    assert iso(1795466396.25, 6) == "2026-11-23T20:39:56.250000Z"
    for text in ("2026-11-23T20:39:56Z", "2026-11-23T20:39:56.500Z", "2026-11-23T20:39:56"):
        assert epoch(iso(epoch(text), 3)) == epoch(text)
