"""The one place litellm is imported: lazily, because `import litellm` costs about 2.4 s."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["load"]


def load() -> Any:
    """Import litellm with its bundled price map (never fetched from the internet) and quiet."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True  # it prints a provider banner to stdout for unknown models
    return litellm
