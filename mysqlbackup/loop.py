"""Pacing of the background loops (the daemon's reconnects, the archiver's passes),
with the sleep injectable so that tests can drive them."""

import time


def sleep_until(stop, seconds, sleep=time.sleep):
    """Sleep ``seconds`` in short slices, returning early once ``stop()`` is true."""
    deadline = time.monotonic() + seconds
    while not stop() and time.monotonic() < deadline:
        sleep(min(0.1, max(0.0, deadline - time.monotonic())))
