"""Code every parley process shares: models, settings, Redis keys, scripts, store, logging."""
