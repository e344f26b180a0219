"""The MySQL primary's side of the protocol (pure, no I/O): what serve sends a MySQL
8.4/9.x replica where it differs from MariaDB's (``packets``).

Checked on the wire against mysqld 9.7: the handshake (protocol 10, the server's own
version, character set 255, ``caching_sha2_password`` named), the steps of
``caching_sha2_password`` (fast authentication over the SHA-256 scramble; full
authentication: the password in clear over TLS, or without TLS the server's RSA
public key on request (0x02) and the password RSA-OAEP-encrypted XORed with the
scramble), COM_BINLOG_DUMP_GTID's request (the GTID set as binary SID blocks, tagged
or not), the heartbeats (HEARTBEAT_LOG_EVENT, or _V2 when the dump's flags ask for
it) and ER 1236's texts.
"""

import hashlib
import hmac
import struct
import uuid
from collections import namedtuple

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MysqlGtidSet
from mysqlbackup.source.protocol import lenenc_int
from replay.serve.protocol import packets as pk

CACHING_SHA2 = "caching_sha2_password"
CHARSET_UTF8MB4 = 255
# mysqld 9.7's capabilities (0xdfffffff) less what serve does not implement: compression
# (zlib, zstd), LOCAL INFILE, session tracking, DEPRECATE_EOF, optional result set
# metadata, query attributes, multi-factor authentication; SSL only with a certificate
CLIENT_COMPRESS, CLIENT_LOCAL_FILES = 0x20, 0x80
CLIENT_SESSION_TRACK, CLIENT_DEPRECATE_EOF = 0x00800000, 0x01000000
CLIENT_OPTIONAL_RESULTSET_METADATA, CLIENT_ZSTD = 0x02000000, 0x04000000
CLIENT_QUERY_ATTRIBUTES, CLIENT_MULTI_FACTOR_AUTH = 0x08000000, 0x10000000
SERVER_CAPABILITIES = 0xDFFFFFFF & ~(
    pk.CLIENT_SSL | CLIENT_COMPRESS | CLIENT_LOCAL_FILES | CLIENT_SESSION_TRACK
    | CLIENT_DEPRECATE_EOF | CLIENT_OPTIONAL_RESULTSET_METADATA | CLIENT_ZSTD
    | CLIENT_QUERY_ATTRIBUTES | CLIENT_MULTI_FACTOR_AUTH)

# caching_sha2_password's AuthMoreData steps
FAST_AUTH_OK, PERFORM_FULL_AUTH, REQUEST_PUBLIC_KEY = 3, 4, 2

USE_HEARTBEAT_EVENT_V2 = 0x02   # a dump's flag: heartbeats as HEARTBEAT_LOG_EVENT_V2
BINLOG_THROUGH_GTID = 0x04

GtidDumpRequest = namedtuple("GtidDumpRequest", "flags server_id file pos gtids")

# ER 1236's texts, as mysqld 9.7 words them
PURGED = ("Cannot replicate because the source purged required binary logs. Replicate the "
          "missing transactions from elsewhere, or provision a new replica from backup. "
          "Consider increasing the source's binary log expiration period. The GTID set sent "
          "by the replica is '{sent}', and the missing transactions are '{missing}'")
AHEAD = ("Replica has more GTIDs than the source has, using the source's SERVER_UUID. This "
         "may indicate that the end of the binary log was truncated or that the last binary "
         "log file was lost, e.g., after a power or disk failure when sync_binlog != 1. The "
         "source may or may not have rolled back transactions that were already replicated "
         "to the replica. Suggest to replicate any transactions that source has rolled back "
         "from replica to source, and/or commit empty transactions on source to account for "
         "transactions that have been committed on source but are not included in "
         "GTID_EXECUTED.")


# --- handshake and authentication -------------------------------------------------

def handshake_v10(connection_id, version, scramble, ssl=False):
    """mysqld's first packet: protocol 10, its version, the 20-byte scramble, character
    set utf8mb4 (255), ``caching_sha2_password``; ``ssl``: CLIENT_SSL offered."""
    if len(scramble) != pk.SCRAMBLE_LEN:
        raise ValueError("the scramble is 20 bytes")
    caps = SERVER_CAPABILITIES | (pk.CLIENT_SSL if ssl else 0)
    return (b"\x0a" + version.encode("ascii") + b"\0" + struct.pack("<I", connection_id)
            + scramble[:8] + b"\0" + struct.pack("<H", caps & 0xFFFF)
            + bytes([CHARSET_UTF8MB4]) + struct.pack("<H", pk.SERVER_STATUS_AUTOCOMMIT)
            + struct.pack("<H", caps >> 16) + bytes([pk.SCRAMBLE_LEN + 1]) + bytes(10)
            + scramble[8:] + b"\0" + CACHING_SHA2.encode("ascii") + b"\0")


def auth_switch_request(plugin, scramble):
    """Ask the client to answer with ``plugin`` over ``scramble``."""
    return b"\xfe" + plugin.encode("ascii") + b"\0" + scramble + b"\0"


def more_data(data):
    """AuthMoreData: 0x01 and the plugin's bytes (a step number, or the public key)."""
    return b"\x01" + (bytes([data]) if isinstance(data, int) else data)


def sha2_token(password, scramble):
    """The client's fast answer: SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + scramble)."""
    stage1 = hashlib.sha256(password.encode("utf-8")).digest()
    mask = hashlib.sha256(hashlib.sha256(stage1).digest() + scramble).digest()
    return bytes(a ^ b for a, b in zip(stage1, mask))


def sha2_token_ok(password, scramble, token):
    """True when ``token`` is the fast answer for ``password`` over ``scramble``."""
    return len(token) == 32 and hmac.compare_digest(sha2_token(password, scramble), token)


def xor_scramble(data, scramble):
    """``data`` XORed with the scramble repeated: how the client masks its password."""
    return bytes(b ^ scramble[i % len(scramble)] for i, b in enumerate(data))


def new_rsa_key(bits=2048):
    """A fresh RSA private key (what mysqld generates at its start when it has none)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def load_rsa_key(pem):
    """The RSA private key of PEM bytes; ValueError (TypeError: another kind of key)
    when it is not one."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise TypeError("not an RSA private key")
    return key


def public_pem(key):
    """The PEM (SubjectPublicKeyInfo) of ``key``'s public half, as mysqld sends it."""
    from cryptography.hazmat.primitives import serialization
    return key.public_key().public_bytes(serialization.Encoding.PEM,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def rsa_password(key, data, scramble):
    """The password a client sent RSA-encrypted (OAEP, SHA-1) and XORed with the
    scramble; None when it does not decrypt or is not NUL-terminated."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    try:
        plain = key.decrypt(data, padding.OAEP(mgf=padding.MGF1(hashes.SHA1()),
                                               algorithm=hashes.SHA1(), label=None))
    except ValueError:
        return None
    clear = xor_scramble(plain, scramble)
    return clear[:-1].decode("utf-8", "replace") if clear.endswith(b"\0") else None


def clear_password(data):
    """The password a client sent in clear over TLS (NUL-terminated)."""
    return bytes(data).rstrip(b"\0").decode("utf-8", "replace")


# --- COM_BINLOG_DUMP_GTID ---------------------------------------------------------

def parse_binlog_dump_gtid(payload):
    """GtidDumpRequest of a COM_BINLOG_DUMP_GTID payload (command byte included);
    MalformedPacket when a field is cut short or the GTID set does not decode."""
    if len(payload) < 11:
        raise pk.MalformedPacket("COM_BINLOG_DUMP_GTID too short")
    flags, server_id, name_len = struct.unpack_from("<HII", payload, 1)
    pos = 11 + name_len
    if pos + 12 > len(payload):
        raise pk.MalformedPacket("COM_BINLOG_DUMP_GTID cut short")
    file = bytes(payload[11:pos]).decode("utf-8", "replace")
    start, size = struct.unpack_from("<QI", payload, pos)
    data = bytes(payload[pos + 12:pos + 12 + size])
    if len(data) != size:
        raise pk.MalformedPacket("COM_BINLOG_DUMP_GTID's GTID set cut short")
    return GtidDumpRequest(flags, server_id, file, start,
                           decode_gtid_set(data) if flags & BINLOG_THROUGH_GTID
                           else MysqlGtidSet())


def _varlen(data, pos):
    """(value, next position) of MySQL's serialization variable-length integer."""
    if pos >= len(data):
        raise pk.MalformedPacket("a tag's length is missing")
    first, extra = data[pos], 0
    while extra < 8 and first & (1 << extra):
        extra += 1
    if pos + 1 + extra > len(data):
        raise pk.MalformedPacket("a tag's length is cut short")
    raw = int.from_bytes(data[pos:pos + 1 + extra], "little")
    return (raw >> (extra + 1) if extra < 8 else int.from_bytes(
        data[pos + 1:pos + 9], "little")), pos + 1 + extra


def decode_gtid_set(data):
    """The MysqlGtidSet of its binary form (the classic one, or MySQL 8.3+'s tagged one:
    format byte, 6-byte count, format byte, and per entry its tag); MalformedPacket
    when it is cut short or names too many entries for its size."""
    if len(data) < 8:
        raise pk.MalformedPacket("the GTID set is cut short")
    tagged = data[0] == ev.GTID_FORMAT_TAGGED == data[7]
    count = int.from_bytes(data[1:7], "little") if tagged else struct.unpack_from(
        "<Q", data, 0)[0]
    if count > len(data) // 24:
        raise pk.MalformedPacket("the GTID set names more entries than it holds")
    result, pos = MysqlGtidSet(), 8
    for _ in range(count):
        if pos + 16 > len(data):
            raise pk.MalformedPacket("the GTID set is cut short")
        sid = str(uuid.UUID(bytes=bytes(data[pos:pos + 16])))
        pos += 16
        if tagged:
            size, pos = _varlen(data, pos)
            tag = bytes(data[pos:pos + size]).decode("ascii", "replace").lower()
            if len(tag) != size:
                raise pk.MalformedPacket("a tag is cut short")
            pos += size
            sid = f"{sid}:{tag}" if tag else sid
        if pos + 8 > len(data):
            raise pk.MalformedPacket("the GTID set is cut short")
        n = struct.unpack_from("<Q", data, pos)[0]
        pos += 8
        if pos + 16 * n > len(data):
            raise pk.MalformedPacket("the GTID set's intervals are cut short")
        for i in range(n):
            lo, hi = struct.unpack_from("<qq", data, pos + 16 * i)
            if not 0 < lo < hi:
                raise pk.MalformedPacket(f"bad GTID interval {lo}-{hi}")
            result.add_interval(sid, lo, hi)
        pos += 16 * n
    return result


# --- artificial events ------------------------------------------------------------

def heartbeat_v2(file, pos, server_id, checksum):
    """HEARTBEAT_LOG_EVENT_V2: its fields as type, length and value (1: the file name,
    2: the position as a length-encoded integer), then 0; timestamp 0, log_pos the
    position (as a 32-bit value)."""
    name, where = file.encode("utf-8"), lenenc_int(pos)
    body = (b"\x01" + lenenc_int(len(name)) + name + b"\x02" + lenenc_int(len(where))
            + where + b"\x00")
    return pk.make_event(ev.HEARTBEAT_V2, body, server_id, pos & 0xFFFFFFFF, checksum)


def heartbeat(file, pos, server_id, checksum, v2):
    """The heartbeat a dump asked for: _V2 when its flags say USE_HEARTBEAT_EVENT_V2."""
    return (heartbeat_v2 if v2 else pk.heartbeat)(file, pos, server_id, checksum)
