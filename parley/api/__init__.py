"""parley's HTTP API and the dashboard page it serves."""
