"""The daemon's local directory: its files, their formats and what they say.

``state`` (the checkpoint and the archiver's state files: names and formats),
``files`` (listing, the lock and its holder, crash recovery), ``status`` (what
``mysqlbackup status`` reports), ``health`` (``status --check``). ``stream/`` writes the
directory; the ``status`` command and replay's ``check`` read it, without importing
``stream/``.
"""
