"""External agents over the Agent Client Protocol: the operator's profiles (config.py), one
session per (room, agent) on this worker (sessions.py) and one turn of it (turns.py)."""
