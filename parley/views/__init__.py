"""How a turn, a stop, a transcript and a room are told, on a terminal or as JSON."""
