"""This process's memory: resident set size, and MLX's own accounting once MLX is in use."""

from __future__ import annotations

import os
import resource
import sys


def rss_bytes() -> int:
    """Resident memory now (Linux: /proc); elsewhere the peak, which is what the OS offers without psutil."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def mlx_memory() -> dict[str, int] | None:
    """MLX's active, peak and cached bytes; None until a runner has imported MLX (listing never does)."""
    mx = sys.modules.get("mlx.core")
    if mx is None:
        return None
    return {"active_bytes": mx.get_active_memory(), "peak_bytes": mx.get_peak_memory(),
            "cache_bytes": mx.get_cache_memory()}
