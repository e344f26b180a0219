"""What guards the archive's promises, above the archive and below its users: a
restore's lease that retention respects (``lease``), the recovery window read for the
metrics (``recovery``), and every object checked against what it promises (``verify``:
``verify`` and ``archive ls``)."""
