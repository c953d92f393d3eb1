"""The HTTP API and dashboard service (``parley api``): FastAPI over the same Client and
RoomStore as the CLI, so every route behaves as its command does."""
