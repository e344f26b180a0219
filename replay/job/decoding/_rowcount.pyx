# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled twin of ``replay.job.decoding.rowcount`` (optional: ``rowcount`` loads it
through ``mysqlbackup.speedups.load_twin``): a rows event's rows counted, not decoded
(``walk_rows``); ``tests/test_rowdecode.py`` holds it to the twin."""

from replay.job.decoding._rowloop cimport _le

# the version of the twins: ``rowcount.TWIN`` must be the same (bump both on a change)
TWIN = 1

# -- the rows of a rows event counted, not decoded (``rowcount.walk_rows``'s twin) -------

def walk_rows(view, Py_ssize_t pos, Py_ssize_t end, plan_of, tuple presents):
    """The number of rows from ``pos`` to ``end``: see the twin, ``rowcount.walk_rows``."""
    cdef const unsigned char[:] v = view
    cdef Py_ssize_t size = v.shape[0], rows = 0, nb
    cdef int prefix
    cdef list walks = [((bin(present).count("1") + 7) // 8, present, {})
                       for present in presents]
    cdef tuple plan, step
    cdef dict plans
    while pos < end:
        for walk in walks:
            nb, plans = walk[0], <dict>walk[2]
            if pos + nb > size:
                raise IndexError("a row runs past the event")
            nulls = _le(&v[pos], nb) if nb <= 8 else \
                int.from_bytes(bytes(v[pos:pos + nb]), "little")
            plan = plans.get(nulls)
            if plan is None:
                plan = plans[nulls] = plan_of(walk[1], nulls)
            pos += nb
            for step in <tuple>plan[0]:
                pos += <Py_ssize_t>step[0]
                prefix = step[1]
                if pos + prefix > size:
                    raise IndexError("a row runs past the event")
                pos += prefix + <Py_ssize_t>_le(&v[pos], prefix)
            pos += <Py_ssize_t>plan[1]
        rows += 1
    if pos != end:
        raise ValueError("a row runs past the event's end")
    return rows
