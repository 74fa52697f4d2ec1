"""A package's public API, named in its __init__ and imported only when first used.

A page that lists runs should not pay for torch.compile's imports because the runner sits in the
same package: `from gaccum_core.runs import run_table` loads gaccum_core.runs.catalog alone.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable


def lazy_exports(package: str, api: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """(__all__, __getattr__) for a package whose modules (keys) offer these names (values)."""
    home = {name: module for module, names in api.items() for name in names}

    def attribute(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(f"{package}.{home[name]}"), name)

    return sorted(home), attribute
