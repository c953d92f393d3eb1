"""The Python client: Client, the results it returns, following a room, the speak queue."""
