"""Tool modules workers load in the tests (PARLEY_WORKER_TOOLS)."""
