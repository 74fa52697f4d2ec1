"""gaccum_core: exact gradient accumulation, its run store, background runner and CLI."""

from gaccum_core.config import ConfigError, RunConfig

__all__ = ["ConfigError", "RunConfig"]
