"""The checkpoint file of a backup directory (disk I/O only).

The checkpoint names a transaction boundary that is durable on local disk
(file, position, executed GTID set) plus facts for ``status``. It is written
through mysqlbackup.durable (tmp -> fsync -> rename -> fsync directory), so after
a crash it is either the old or the new one, never a mix.
"""

import json
import os
from dataclasses import asdict, dataclass, field

from mysqlbackup.durable import write_bytes
from mysqlbackup.errors import LocalStateError

STATE_FILE = "mysqlbackup.state.json"
LOCK_FILE = "mysqlbackup.lock"
LOCK_HOLDER_FILE = "mysqlbackup.lock.json"  # pid and start time of the lock's holder
ARCHIVE_STATE_FILE = "mysqlbackup.archive.json"
HORIZON_FILE = "mysqlbackup.horizon.json"  # the primary's binlogs as last read (horizon)
FORMAT_VERSION = 1


@dataclass
class State:
    """Durable position of a backup directory and what status shows about it."""

    file: str
    pos: int
    gtid: str = None
    flavor: str = None
    source_identity: str = None
    server_id: int = None
    server_uuid: str = None
    source_address: str = None
    last_ack: dict = None            # {"file", "pos", "time"}
    source_position: dict = None     # {"file", "pos", "time"} as last seen from the source
    last_event_time: int = None      # timestamp of the last durable event header
    updated: float = None
    extra: dict = field(default_factory=dict)
    epoch: int = 1                   # the history's epoch ``file`` belongs to (failovers)
    epochs: list = None              # the history of each later epoch (archive.window.EpochHistory)
    origin_identity: str = None      # epoch 1's source: the archive's source name


def save_state(directory, state, fsync=os.fsync):
    """Replace the checkpoint atomically and durably (LocalStateError when it cannot)."""
    path = os.path.join(directory, STATE_FILE)
    data = json.dumps({"format": FORMAT_VERSION, **asdict(state)}, indent=1, sort_keys=True)
    try:
        write_bytes(path, data.encode("utf-8"), mode=0o640, fsync=fsync)
    except OSError as e:
        raise LocalStateError(f"cannot write the checkpoint {path}: "
                              f"{e.strerror or e}") from None


def load_state(directory):
    """The checkpoint of ``directory``, or None when there is none yet."""
    path = os.path.join(directory, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise LocalStateError(f"cannot read the checkpoint {path}: {e}") from None
    if raw.pop("format", None) != FORMAT_VERSION:
        raise LocalStateError(f"{path} has an unknown format version")
    known = State.__dataclass_fields__
    return State(**{k: v for k, v in raw.items() if k in known})
