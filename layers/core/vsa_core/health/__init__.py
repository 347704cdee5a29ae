"""Array health: the scheduled check of what the hosts see, backups overdue, dead controllers."""
