"""Tools modules the tests' workers offer (PARLEY_WORKER_TOOLS)."""
