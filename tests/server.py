"""A real uvicorn server on a free loopback port, in a thread, for end-to-end tests with the official clients."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import uvicorn

from service.api.app import create_app
from service.catalog import load_catalog
from service.config import load_settings

TEST_CATALOG = Path(__file__).resolve().parent / "catalog"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, models_dir: Path, **settings):
        self.settings = load_settings(port=free_port(), models_dir=str(models_dir), **settings)
        catalog = load_catalog([TEST_CATALOG]).raise_for_problems()
        self.app = create_app(self.settings, catalog)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.settings.port, log_level="warning",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.settings.port}"

    @property
    def manager(self):
        return self.app.state.manager

    def __enter__(self) -> Server:
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def wait(self, predicate, timeout: float = 10.0) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if predicate():
                return True
            time.sleep(0.02)
        return predicate()
