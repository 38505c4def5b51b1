"""Ollama `keep_alive` durations: numbers are seconds, strings are Go durations ("10m", "1h30m", "-1")."""

from __future__ import annotations

import math
import re

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
FOREVER = math.inf
LONGEST = 10 * 365 * 86400.0  # longer is a mistake (or an attack on date arithmetic): say "forever" with -1


def parse_keep_alive(value) -> float:
    """Seconds to keep a model loaded after its last request: 0 = unload now, inf = forever (negative)."""
    if isinstance(value, bool) or value is None:
        _bad(value)
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sign = -1.0 if text.startswith("-") else 1.0
        body = text.lstrip("+-")
        if body in ("0", ""):
            seconds = 0.0 if body == "0" else _bad(value)
        elif re.fullmatch(r"\d+(\.\d+)?", body):
            seconds = sign * float(body)  # plain seconds as text: accepted (Ollama's env var does too)
        else:
            parts = _PART.findall(body)
            if not parts or "".join(n + u for n, u in parts) != body:
                _bad(value)
            seconds = sign * sum(float(n) * _UNITS[u] for n, u in parts)
    else:
        _bad(value)
    if not math.isfinite(seconds) or seconds > LONGEST:
        raise ValueError(f"invalid keep_alive {value!r}: at most {LONGEST // 86400:.0f} days; a negative value "
                         "keeps the model loaded for good")
    return FOREVER if seconds < 0 else seconds


def _bad(value):
    raise ValueError(f"invalid keep_alive {value!r}: use seconds (e.g. 300) or a duration like \"10m\", \"1h30m\"")
