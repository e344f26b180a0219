"""Archive retention: ``policy`` (pure: what may go and why, the windows before and
after) and ``prune`` (read the archive, plan, delete: index before object)."""
