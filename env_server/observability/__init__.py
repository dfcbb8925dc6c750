"""What the server tells its operators: Prometheus metrics, rolling live stats, and the JSON event log."""
