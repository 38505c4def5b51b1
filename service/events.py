"""What happened to each model, kept in memory (bounded) and written to the log: pulls, loads and their
failures, unloads and why, refusals by the memory budget, request errors. Served by `GET /api/events`."""

from __future__ import annotations

import logging
import threading
from collections import deque
from datetime import datetime, timezone
from typing import Any

log = logging.getLogger("mlx_service.events")

# Why a model was unloaded.
UNLOAD_REASONS = ("request", "idle", "keep_alive", "lru", "memory", "deleted", "shutdown")


class EventLog:
    def __init__(self, size: int = 2000):
        self._events: deque[dict] = deque(maxlen=size)
        self._next = 1
        self._lock = threading.Lock()  # pulls record from their worker threads

    def record(self, kind: str, model: str | None = None, **details: Any) -> dict:
        with self._lock:
            event = {"id": self._next, "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                     "kind": kind, "model": model, **details}
            self._next += 1
            self._events.append(event)
        log.info("%s %s %s", kind, model or "-", " ".join(f"{k}={v}" for k, v in details.items()))
        return event

    def list(self, kinds: set[str] | None = None, since: int = 0, limit: int = 200) -> list[dict]:
        """The newest `limit` events after id `since`, oldest first; of some kinds if asked."""
        with self._lock:
            found = [e for e in self._events if e["id"] > since and (not kinds or e["kind"] in kinds)]
        return found[-limit:]
