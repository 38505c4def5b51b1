"""A local fake of the Hugging Face Hub's HTTP contract (huggingface_hub 2.x), with fault injection.

Serves repos made of in-memory files on 127.0.0.1; see ../shared/reference/hub-catalog.md §1.9 for the routes
and headers the client needs. Faults: drop the connection after N bytes of a file, serve wrong bytes, stall,
answer 401/403 (gated) or 404 (repo, revision, file).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import unquote, urlparse


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    files: dict[str, bytes]
    sha: str = "0123456789abcdef0123456789abcdef01234567"
    branches: dict[str, str] = field(default_factory=lambda: {})
    gated: int | None = None  # 401 or 403

    def lfs(self, path: str) -> bool:
        return path.endswith(".safetensors")

    def etag(self, path: str) -> str:
        data = self.files[path]
        return hashlib.sha256(data).hexdigest() if self.lfs(path) else git_blob_sha1(data)


@dataclass
class Faults:
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before the connection drops
    drop_times: int = 1  # how many requests of that file are dropped
    corrupt: set[str] = field(default_factory=set)  # paths served with wrong bytes
    stall: dict[str, float] = field(default_factory=dict)  # path -> seconds to stall after half the file
    missing: set[str] = field(default_factory=set)  # listed in the tree, but 404 EntryNotFound on download
    # A hostile mirror: rewrite the revision info or the tree listing before it is sent; append bytes to a file.
    info: Callable[[dict], dict] | None = None
    tree: Callable[[list], list] | None = None
    extra: dict[str, bytes] = field(default_factory=dict)


class FakeHub:
    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.faults = Faults()
        self.bytes_sent: dict[str, int] = {}
        self.requests: list[tuple[str, str]] = []
        self._drops: dict[str, int] = {}
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub._route(self, head=True)

            def do_GET(self):
                hub._route(self, head=False)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- routing ----------------------------------------------------------------------------------------
    def _route(self, h: BaseHTTPRequestHandler, head: bool) -> None:
        path = unquote(urlparse(h.path).path)
        with self._lock:
            self.requests.append(("HEAD" if head else "GET", path))
        m = re.match(r"^/api/models/([^/]+/[^/]+)(?:/revision/([^/]+))?$", path)
        if m:
            return self._info(h, m.group(1), m.group(2) or "main")
        m = re.match(r"^/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?$", path)
        if m:
            return self._tree(h, m.group(1), m.group(2))
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if m:
            return self._file(h, m.group(1), m.group(2), m.group(3), head)
        self._error(h, 404, None, "not found", head)

    def _repo(self, h, repo_id: str, revision: str, head: bool):
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 404, "RepoNotFound", f"Repository {repo_id} not found", head)
            return None, None
        if repo.gated:
            self._error(h, repo.gated, "GatedRepo", f"Access to {repo_id} is restricted", head)
            return None, None
        sha = repo.sha if revision in ("main", repo.sha) else repo.branches.get(revision)
        if sha is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return None, None
        return repo, sha

    def _info(self, h, repo_id: str, revision: str) -> None:
        repo, sha = self._repo(h, repo_id, revision, False)
        if repo is None:
            return
        siblings = [{"rfilename": p, "size": len(d), "blobId": git_blob_sha1(d)} for p, d in repo.files.items()]
        info = {"id": repo_id, "modelId": repo_id, "sha": sha, "siblings": siblings, "private": False}
        self._json(h, self.faults.info(info) if self.faults.info else info)

    def _tree(self, h, repo_id: str, revision: str) -> None:
        repo, sha = self._repo(h, repo_id, revision, False)
        if repo is None:
            return
        entries = []
        for p, data in repo.files.items():
            entry = {"type": "file", "path": p, "size": len(data), "oid": git_blob_sha1(data)}
            if repo.lfs(p):
                entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
            entries.append(entry)
        self._json(h, self.faults.tree(entries) if self.faults.tree else entries)

    def _file(self, h, repo_id: str, revision: str, path: str, head: bool) -> None:
        repo, sha = self._repo(h, repo_id, revision, head)
        if repo is None:
            return
        if path not in repo.files or path in self.faults.missing:
            return self._error(h, 404, "EntryNotFound", f"{path} does not exist", head, {"X-Repo-Commit": sha})
        data = repo.files[path]
        if path in self.faults.corrupt:
            data = bytes(b ^ 0xFF for b in data)
        etag = repo.etag(path)
        start, end = 0, len(data) - 1
        rng = h.headers.get("Range")
        if rng and not head:
            m = re.match(r"bytes=(\d+)-(\d*)", rng)
            start, end = int(m.group(1)), int(m.group(2)) if m.group(2) else len(data) - 1
        body = data[start:end + 1] + self.faults.extra.get(path, b"")
        partial = bool(rng) and not head
        h.send_response(206 if partial else 200)
        h.send_header("ETag", f'"{etag}"')
        h.send_header("X-Repo-Commit", sha)
        if repo.lfs(path):
            h.send_header("X-Linked-Etag", f'"{etag}"')
            h.send_header("X-Linked-Size", str(len(data)))
        h.send_header("Content-Length", str(len(data) if head else len(body)))  # `extra` bytes included
        if partial:
            h.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        h.end_headers()
        if head:
            return
        drop_at = self.faults.drop_after.get(path)
        with self._lock:
            dropping = drop_at is not None and self._drops.get(path, 0) < self.faults.drop_times and start < drop_at
            if dropping:
                self._drops[path] = self._drops.get(path, 0) + 1
        if dropping:
            body = body[: drop_at - start]
        stall = self.faults.stall.get(path)
        try:
            for i in range(0, len(body), 65536):
                if stall and i >= len(body) // 2:
                    time.sleep(stall)
                    stall = None
                chunk = body[i:i + 65536]
                h.wfile.write(chunk)
                with self._lock:
                    self.bytes_sent[path] = self.bytes_sent.get(path, 0) + len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            return
        if dropping:
            h.close_connection = True
            h.wfile.flush()
            h.connection.shutdown(2)

    # ---- helpers ----------------------------------------------------------------------------------------
    def _json(self, h, payload) -> None:
        body = json.dumps(payload).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    def _error(self, h, status: int, code: str | None, message: str, head: bool, extra: dict | None = None) -> None:
        body = b"" if head else json.dumps({"error": message}).encode()
        h.send_response(status)
        if code:
            h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", message)
        for k, v in (extra or {}).items():
            h.send_header(k, v)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if body:
            h.wfile.write(body)
