"""Collation ids as a binlog carries them -> (character set, collation) names (pure).

A USER_VAR event names the collation of a string by id. Ids under 2048 are the classic
ones both engines share (PyMySQL's table, which the project pins, knows them); from
2048 on they are MariaDB 11's UCA 14.0.0 collations, numbered by rule:
2048 + (character set << 8) + (tailoring << 3) + (no pad: 4, accent sensitive: 2, case
sensitive: 1), as ``information_schema.COLLATION_CHARACTER_SET_APPLICABILITY`` of
MariaDB 11.8 lists them.
"""

from pymysql.charset import charset_by_id

UCA1400_CHARSETS = ("utf8mb3", "utf8mb4", "ucs2", "utf16", "utf32")
UCA1400_TAILORINGS = {
    0: "", 1: "icelandic", 2: "latvian", 3: "romanian", 4: "slovenian", 5: "polish",
    6: "estonian", 7: "spanish", 8: "swedish", 9: "turkish", 10: "czech", 11: "danish",
    12: "lithuanian", 13: "slovak", 14: "spanish2", 15: "roman", 16: "persian",
    17: "esperanto", 18: "hungarian", 19: "sinhala", 20: "german2", 23: "vietnamese",
    24: "croatian"}


def collation_of(collation_id):
    """(character set, collation) of ``collation_id``; KeyError for an unknown one."""
    if collation_id < 2048:
        charset = charset_by_id(collation_id)
        return charset.name, charset.collation
    charset, rest = divmod(collation_id - 2048, 256)
    tailoring, flags = divmod(rest, 8)
    if charset >= len(UCA1400_CHARSETS) or tailoring not in UCA1400_TAILORINGS:
        raise KeyError(collation_id)
    name = UCA1400_CHARSETS[charset]
    return name, (f"{name}_uca1400" + (f"_{UCA1400_TAILORINGS[tailoring]}"
                                       if UCA1400_TAILORINGS[tailoring] else "")
                  + ("_nopad" if flags & 4 else "") + ("_as" if flags & 2 else "_ai")
                  + ("_cs" if flags & 1 else "_ci"))
