"""gaccum_core: exact gradient accumulation, its run store, background runner and CLI."""
