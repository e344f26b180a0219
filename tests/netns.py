"""Hosts for tests: network namespaces on a bridge of their own (root only).

``Network`` makes a bridge in the root namespace with the first address of a private
/24, and one namespace per host, joined to the bridge by a veth pair, holding the next
addresses. Processes started with ``start`` (in a namespace, or in the root one) get a
process group of their own and are ended, group by group, by ``close``, which also
removes every namespace, veth and the bridge: the test's hosts talk to nothing but each
other and the root namespace's address on the bridge.
"""

import os
import shutil
import signal
import socket
import subprocess
import time


def why_not():
    """Why this machine cannot make the namespaces (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's ip"
    return None


def _ip(*args, check=True):
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class Network:
    """A bridge ``10.231.N.1/24`` and ``hosts`` namespaces at ``.2``, ``.3``, ..."""

    def __init__(self, hosts, tag=None):
        tag = tag or f"{os.getpid() % 100000}"
        subnet = 20 + os.getpid() % 200  # two runs side by side: two subnets, most likely
        self.prefix = f"10.231.{subnet}"
        self.bridge = f"mbbr{tag}"[:15]
        self.gateway = f"{self.prefix}.1"
        self.hosts = {f"mbns{tag}-{i}": f"{self.prefix}.{i + 2}" for i in range(hosts)}
        self.processes = []
        self._made = []

    def open(self):
        """Make the bridge, the namespaces and their links; undone by ``close``."""
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, (name, address) in enumerate(self.hosts.items()):
                _ip("netns", "add", name)
                self._made.append(("netns", name))
                outside, inside = f"{self.bridge}v{i}", "eth0"
                _ip("link", "add", outside, "type", "veth", "peer", "name", inside,
                    "netns", name)
                self._made.append(("link", outside))
                _ip("link", "set", outside, "master", self.bridge)
                _ip("link", "set", outside, "up")
                for args in (("addr", "add", f"{address}/24", "dev", inside),
                             ("link", "set", inside, "up"), ("link", "set", "lo", "up")):
                    _ip("-n", name, *args)
        except BaseException:
            self.close()
            raise
        return self

    def start(self, argv, host=None, env=None, cwd=None, log=None):
        """Start ``argv`` in namespace ``host`` (None: the root namespace), in a
        process group of its own, output to the file ``log``; returns the Popen."""
        prefix = ["ip", "netns", "exec", host] if host else []
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            process = subprocess.Popen(prefix + list(argv), env=env, cwd=cwd, stdout=out,
                                       stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if log:
                out.close()
        self.processes.append(process)
        return process

    def close(self):
        """End every process started here (its group), then remove what ``open`` made."""
        for process in reversed(self.processes):
            _signal_group(process, signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                _signal_group(process, signal.SIGKILL)
                process.wait(timeout=5)
            _signal_group(process, signal.SIGKILL)  # what the leader left in its group
        self.processes = []
        problems = []
        for kind, name in reversed(self._made):
            try:
                _ip(kind, "del", name, check=False)
            except Exception as e:  # noqa: BLE001 - the rest is removed all the same
                problems.append(f"{kind} {name}: {e}")
        self._made = []
        if problems:
            raise RuntimeError("left behind: " + "; ".join(problems))


def _signal_group(process, sig):
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_port(address, port, timeout=60, process=None):
    """Wait until ``address:port`` accepts a TCP connection (from the root namespace);
    fail early when ``process`` ended."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{process.args!r} ended ({process.returncode}) before "
                                   f"listening on {address}:{port}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {address}:{port} after "
                                   f"{timeout}s") from None
            time.sleep(0.1)
