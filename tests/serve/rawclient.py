"""A raw-socket MySQL client for the hostile-client tests: it sends what a real client
would not (long names, bad lengths, trickled bytes, huge packets) and reads what the
server answers. Loopback only; every socket has a timeout."""

import socket
import struct
import time

from replay.serve.protocol import packets as pk

CAPS = (pk.CLIENT_PROTOCOL_41 | pk.CLIENT_SECURE_CONNECTION | pk.CLIENT_PLUGIN_AUTH
        | pk.CLIENT_PLUGIN_AUTH_LENENC)


def connect(port, source="127.0.0.1", timeout=5.0):
    """A TCP connection to serve on 127.0.0.1:port from ``source`` (a loopback address)."""
    sock = socket.socket()
    sock.settimeout(timeout)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def recv_exact(sock, n):
    out = b""
    while len(out) < n:
        data = sock.recv(n - len(out))
        if not data:
            raise ConnectionError("closed by the server")
        out += data
    return out


def read_packet(sock):
    """(sequence id, payload) of one packet (no 16 MiB joining: the server sends none here)."""
    head = recv_exact(sock, 4)
    size = head[0] | head[1] << 8 | head[2] << 16
    return head[3], recv_exact(sock, size)


def send_packet(sock, payload, seq):
    sock.sendall(pk.frames(payload, seq)[0])


def error_of(payload):
    """(code, message) of an ERR payload; AssertionError for anything else."""
    assert payload[:1] == b"\xff", payload[:40]
    code = struct.unpack_from("<H", payload, 1)[0]
    return code, payload[9:].decode("utf-8", "replace")


def greeting(sock):
    """The 20-byte scramble of the server's handshake."""
    _, payload = read_packet(sock)
    assert payload[0] == 10
    end = payload.index(b"\0", 1)
    first = payload[end + 5:end + 13]
    rest_at = end + 14 + 2 + 1 + 2 + 2 + 1 + 10
    return first + payload[rest_at:rest_at + 12]


def response(user, auth=b"", caps=CAPS, raw_auth_length=None):
    """A HandshakeResponse41; ``raw_auth_length`` replaces the auth data's length bytes."""
    head = struct.pack("<IIB23x", caps, 1 << 24, pk.CHARSET_LATIN1)
    length = raw_auth_length if raw_auth_length is not None else bytes([len(auth)])
    return head + user + b"\0" + length + auth + pk.NATIVE_PASSWORD.encode() + b"\0"


def login(port, user, password, source="127.0.0.1", timeout=5.0):
    """(socket, OK or ERR payload) of a whole login."""
    sock = connect(port, source, timeout)
    try:
        scramble = greeting(sock)
        token = pk.native_token(password, scramble) if password else b""
        send_packet(sock, response(user.encode(), token), 1)
        _, answer = read_packet(sock)
    except BaseException:
        sock.close()
        raise
    return sock, answer


def query(sock, sql):
    """The first packet of the server's answer to a COM_QUERY."""
    send_packet(sock, b"\x03" + sql.encode(), 0)
    return read_packet(sock)[1]


def closed_by_server(sock, timeout):
    """True when the server closes ``sock`` (EOF or reset) within ``timeout`` seconds;
    what it sends before is read and dropped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if not sock.recv(65536):
                return True
        except socket.timeout:
            return False
        except OSError:
            return True
    return False
