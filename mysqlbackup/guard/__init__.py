"""What guards the archive's promises, above the archive and below its users: a
restore's lease that retention respects (``lease``), and the recovery window read for
the metrics (``recovery``)."""
