"""Parallel apply of one commit group: bodies side by side, commits in order (threads).

``run_batch`` gives script i to worker i % n; each worker runs its script's body,
waits for its turn (every script before it committed) and commits. The first
failure ends the batch: scripts after it never commit, and the caller rolls the
unfinished ones back and applies them one by one.
"""

import threading


class Turn:
    """Commit order of a parallel batch: index i commits only after i - 1 did."""

    def __init__(self):
        self.next, self.error = 0, None
        self.failed = False
        self.cond = threading.Condition()

    def wait(self, index):
        """Block until it is ``index``'s turn; False when the batch failed before it."""
        with self.cond:
            while self.next != index and not self.failed:
                self.cond.wait()
            return not self.failed

    def done(self, index):
        """``index`` committed: the next one's turn."""
        with self.cond:
            self.next = index + 1
            self.cond.notify_all()

    def fail(self, index, error):
        """``index`` failed with ``error``: the batch ends (the first error is kept)."""
        with self.cond:
            self.failed = True
            self.error = self.error or (index, error)
            self.cond.notify_all()


def run_batch(sessions, scripts, fde_event, fragments):
    """Apply ``scripts`` on the ``sessions`` (one thread each), committing in order; the
    Turn says how many committed (``next``) and the first error."""
    n, turn = len(sessions), Turn()
    threads = [threading.Thread(target=_worker, args=(sessions[w], scripts[w::n], w, n, turn,
                                                      fde_event, fragments))
               for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return turn


def _worker(session, scripts, first, step, turn, fde_event, fragments):
    """One worker's share of a batch: run each body, wait for its turn, commit."""
    for k, script in enumerate(scripts):
        index = first + k * step
        try:
            session.use_fde(fde_event)
            for packet in script.body:
                session.send(packet, fragments)
            if not turn.wait(index):
                return
            session.run(script.commit)
        except Exception as e:  # noqa: BLE001 - any failure ends the batch's parallel part
            turn.fail(index, e)
            return
        turn.done(index)
