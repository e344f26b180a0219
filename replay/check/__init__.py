"""``mysqlbackup check``: can a restore to the newest archived moment be planned right
now, with a young enough base and an archive close to the daemon? One Nagios-style
verdict for cron, systemd timers and monitoring.

``gather`` reads the archive (the restore's own planning: ``replay.restore.run.plan_restore``)
and the daemon's directory (``mysqlbackup.localdir.status.collect_status``: the archive lag
``status --check`` judges too); ``verdict`` turns those facts into checks, lines, a JSON
document and the exit code (pure); ``cli`` is the command.
"""
