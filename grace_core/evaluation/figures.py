"""Matplotlib without a display, and figures rendered to PNG bytes (the callers decide where
the bytes go)."""

from __future__ import annotations

import io
from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png_bytes(fig: Any) -> bytes:
    """The figure as PNG bytes (100 dpi); the figure is closed."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    pyplot().close(fig)
    return buf.getvalue()
