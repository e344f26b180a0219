"""A source's history across failovers: epochs, and where each one takes over (pure).

Epoch 1 is the first server a daemon streamed for the source. When that server fails
and the daemon follows the promoted one by GTID (``stream --follow-by-gtid``), the new
server's files start epoch 2, and so on, the way PostgreSQL's timelines branch. Each
epoch's files live under a key source of their own (``names.epoch_source``), so no
server's file is ever taken for, overwritten or deleted because of another server's
file of the same name. The history object of epoch N (``{source}/epoch/{N}/history.json``),
written once before any of its files, says which server it is, the file it starts
with, and where the epoch before it ends: the daemon's durable file:pos and GTID state
at the switch.

Readers follow epochs in order. The new server's first file is archived whole (its
bytes are the server's own): it starts with transactions the old server wrote too,
which are duplicates by GTID. Every reader skips those (``Switch.skip``: the GTID state
where the previous epoch's archive ends) and never applies a transaction twice.

A switch is sound (``switch_problem``) when the new epoch's first file is the one its
history names, starts within what the previous epoch archived (no gap between them),
and the previous epoch's archive does not go past where the new epoch took over (no
transaction of the old server that the new one lacks).
"""

import json
from dataclasses import asdict, dataclass
from typing import Optional

from mysqlbackup.errors import CorruptBinlog

HISTORY_VERSION = 1


@dataclass(frozen=True)
class EpochHistory:
    """Epoch ``epoch`` (> 1) of a source: the server, its first file, and the switch."""

    epoch: int
    server_id: int
    server_uuid: Optional[str]
    identity: str                  # the server's identity (server_uuid or server-id-N)
    first_file: str                # the new server's file the epoch starts with (from 4)
    start_gtid: Optional[str]      # the durable GTID state at the switch
    previous_file: str             # the previous epoch's durable end at the switch
    previous_pos: int
    started_at: float              # when the daemon switched (epoch seconds, UTC)

    def to_dict(self):
        return dict(asdict(self), version=HISTORY_VERSION)

    def describe(self):
        """One line for ``archive ls`` and errors."""
        return (f"epoch {self.epoch}: server {self.identity} (server_id {self.server_id}) "
                f"from {self.first_file}, after GTID {self.start_gtid or '(none)'} "
                f"(epoch {self.epoch - 1} ends at {self.previous_file}:{self.previous_pos})")


_FIELDS = {"epoch": int, "server_id": int, "identity": str, "first_file": str,
           "previous_file": str, "previous_pos": int, "started_at": (int, float)}


def parse_history(raw, where):
    """The EpochHistory of a history object's bytes; CorruptBinlog naming ``where``."""
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise CorruptBinlog(f"not a history object: {e}", where) from None
    if not isinstance(data, dict):
        raise CorruptBinlog("not a history object", where)
    for name, kind in _FIELDS.items():
        if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
            raise CorruptBinlog(f"history field {name!r} is missing or not a {kind}", where)
    for name in ("server_uuid", "start_gtid"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise CorruptBinlog(f"history field {name!r} is not text", where)
    known = EpochHistory.__dataclass_fields__
    return EpochHistory(**{k: data.get(k) for k in known})


@dataclass(frozen=True)
class Switch:
    """Where a reader crosses from one epoch to the next: ``skip`` is the GTID state where
    the previous epoch's archive ends (the new epoch's transactions within it are
    duplicates), ``history`` the new epoch's."""

    history: EpochHistory
    skip: Optional[str]


def switch_problem(history, prev_name, prev_after, first_name, first_before, contains):
    """Why the previous epoch's last archived file (``prev_name``, ending at GTID state
    ``prev_after``) does not lead into the new epoch's first archived file
    (``first_name``, starting after ``first_before``); None when it does. ``contains``
    is ``window.contains`` (GTID text outer, inner)."""
    where = f"epoch {history.epoch}"
    if first_name != history.first_file:
        return (f"{where} starts with {history.first_file} on {history.identity}, but its "
                f"first archived file is {first_name}")
    if not contains(prev_after, first_before):
        return (f"{where}: GTID hole at the switch to {history.identity}: epoch "
                f"{history.epoch - 1} ends with {prev_name} at {prev_after or '?'}, "
                f"{first_name} starts after {first_before or '?'}")
    if history.start_gtid and not contains(history.start_gtid, prev_after):
        return (f"{where}: epoch {history.epoch - 1} ends with {prev_name} at GTID "
                f"{prev_after}, past where {history.identity} took over "
                f"({history.start_gtid}): its later transactions are not in the new history")
    return None
