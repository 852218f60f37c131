"""Everything NATS: embedded server, connection, subjects, transaction log, leases."""
