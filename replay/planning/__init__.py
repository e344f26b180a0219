"""What a command reads and where it starts and stops, from the archive's indexes
alone: ``plan`` (``units_to_read``: the files, in order, checked as a chain),
``units`` (the checks on them), ``selection`` (start, stop and filters, per file and
per transaction), ``options`` (the command line's start and filter text). Replay,
restore, serve, drill, find and check all plan here."""
