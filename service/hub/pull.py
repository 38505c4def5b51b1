"""Pull a checkpoint into the standard Hugging Face cache: our own resumable, verified download.

Why not `snapshot_download`: huggingface_hub 2.4 deletes a partial file when a download fails, so an
interrupted pull starts over. Here each file streams into `blobs/<etag>.mlx-partial`, which survives a dropped
connection or a killed process; the next attempt continues with an HTTP Range request. Every file is checked
(sha256 for LFS files, the git blob sha1 for others) before it becomes `blobs/<etag>`, and the
`snapshots/<sha>/` folder - what loaders and `locate` look for - is created only once every file is in place,
so a failed, cancelled or corrupted pull never looks complete. The layout is the hub's own, so checkpoints
fetched by `hf download` or mlx-lm are found and not fetched again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from filelock import FileLock

from ..errors import BadRequest, NotFound, ServiceError
from . import untrusted
from .untrusted import TamperedListing

LOADER_FILES = ("*.safetensors", "*.json", "*.jinja", "tokenizer.model", "*.tiktoken", "*.txt")
CHUNK = 1 << 20


class PullError(ServiceError):
    """A pull failed; the message says why and what to do. Nothing incomplete was left looking complete."""


class Offline(PullError):
    status = 503


class Gated(PullError):
    status = 403
    anthropic_type = "permission_error"


class PullCancelled(PullError):
    status = 499


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    etag: str  # sha256 for LFS files, git blob sha1 for the others: also the blob's name in the cache
    lfs: bool


@dataclass(frozen=True)
class Plan:
    repo: str
    revision: str
    sha: str
    files: tuple[RemoteFile, ...]

    @property
    def total(self) -> int:
        return sum(f.size for f in self.files)


Progress = Callable[[dict], None]


def repo_folder(cache_dir: Path, repo: str) -> Path:
    return cache_dir / ("models--" + repo.replace("/", "--"))


class Puller:
    def __init__(self, cache_dir: Path | None = None, endpoint: str | None = None, token: str | None = None,
                 stall_timeout: float = 30.0, retries: int = 5, backoff: float = 0.5, offline: bool | None = None):
        from huggingface_hub import constants

        self.cache_dir = Path(cache_dir or constants.HF_HUB_CACHE)
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self.token = token if token is not None else (os.environ.get("HF_TOKEN") or None)
        self.offline = bool(constants.HF_HUB_OFFLINE) if offline is None else offline
        self.stall_timeout, self.retries, self.backoff = stall_timeout, retries, backoff
        self._shared: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    # ---- planning ---------------------------------------------------------------------------------------
    def plan(self, repo: str, revision: str | None = None, trust_remote_code: bool = False) -> Plan:
        """Resolve the revision to a commit and list the files a loader needs, with their sizes and checksums."""
        if self.offline:
            raise Offline(f"cannot pull {repo}: offline (HF_HUB_OFFLINE is set); models already on disk are "
                          "still listed and served")
        untrusted.repo_id(repo)
        rev = untrusted.revision(repo, revision or "main")
        info = self._get_json(repo, f"/api/models/{repo}/revision/{quote(rev, safe='')}", rev)
        sha = untrusted.commit(repo, info.get("sha") if isinstance(info, dict) else None)
        patterns = LOADER_FILES + (("*.py",) if trust_remote_code else ())
        files, listed = [], 0
        url = f"/api/models/{repo}/tree/{sha}?recursive=true&expand=false"
        while url:
            page, url = self._get_json(repo, url, rev, paged=True)
            if not isinstance(page, list) or (listed := listed + len(page)) > untrusted.MAX_FILES:
                raise TamperedListing(f"the Hub's file listing for {repo} is not a list of at most "
                                      f"{untrusted.MAX_FILES:,} files")
            files += [f for f in map(lambda item: _listed(repo, item), page)
                      if f and any(fnmatch.fnmatch(f.path.split("/")[-1], p) for p in patterns)]
        if not any(f.path == "config.json" for f in files):
            raise BadRequest(f"{repo} has no config.json: it is not a model checkpoint a loader can use")
        return Plan(repo, rev, sha, tuple(files))

    def headers(self) -> dict:
        headers = {"Accept-Encoding": "identity"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _get_json(self, repo: str, path: str, revision: str, paged: bool = False):
        from huggingface_hub.utils import httpx

        url = path if path.startswith("http") else self.endpoint + path
        try:
            r = httpx.get(url, headers=self.headers(), timeout=30, follow_redirects=True)
        except httpx.TransportError as exc:
            raise Offline(f"cannot reach the Hub at {self.endpoint}: {exc}") from None
        code = r.headers.get("X-Error-Code", "")
        if code == "GatedRepo" or r.status_code in (401, 403):
            raise Gated(f"the Hub refused access to {repo} ({r.status_code}): accept its license at "
                        f"{self.endpoint}/{repo} and set HF_TOKEN to a token of that account")
        if code == "RevisionNotFound":
            raise NotFound(f"{repo} has no revision {revision!r}")
        if r.status_code == 404:
            raise NotFound(f"{repo} was not found on the Hub ({self.endpoint}/{repo}); if it is private, set "
                           "HF_TOKEN")
        if r.status_code != 200:
            raise PullError(f"the Hub answered HTTP {r.status_code} for {repo}: {r.text[:200]}")
        try:
            data = r.json()
        except ValueError:
            raise TamperedListing(f"the Hub answered {repo} with something that is not JSON") from None
        if paged:
            following = r.links.get("next", {}).get("url")
            if following and not following.startswith(self.endpoint + "/"):
                raise TamperedListing(f"the Hub's listing for {repo} continues on another server: {following[:100]}")
            return data, following
        return data

    # ---- pulling ----------------------------------------------------------------------------------------
    def pull(self, plan: Plan, progress: Progress | None = None, cancel: threading.Event | None = None) -> Path:
        """Download what is missing, verify it, then publish the snapshot. Concurrent pulls share the work."""
        progress = progress or (lambda event: None)
        cancel = cancel or threading.Event()
        with self._guard:
            shared = self._shared.setdefault((plan.repo, plan.sha), threading.Lock())
        with shared:
            return self._pull(plan, progress, cancel)

    def _pull(self, plan: Plan, progress: Progress, cancel: threading.Event) -> Path:
        folder = repo_folder(self.cache_dir, plan.repo)
        blobs = folder / "blobs"
        blobs.mkdir(parents=True, exist_ok=True)
        missing = [f for f in plan.files if not (blobs / f.etag).is_file()]
        have = {f.path: f.size for f in plan.files if f not in missing}
        partial = {f.path: self._partial(blobs, f).stat().st_size for f in missing if self._partial(blobs, f).exists()}
        need = sum(f.size for f in missing) - sum(partial.values())
        free = shutil.disk_usage(blobs).free
        if need > free:
            raise PullError(f"not enough disk space for {plan.repo}: {need:,} bytes to download, {free:,} free "
                            "in the model cache")
        done = {**have, **partial}
        overall = lambda: {"total": plan.total, "completed": sum(done.values())}  # noqa: E731
        progress({"status": "pulling manifest", **overall()})
        for f in missing:
            if cancel.is_set():
                raise PullCancelled(f"pull of {plan.repo} cancelled; run it again to resume")

            def advance(n: int, f=f) -> None:
                done[f.path] = n
                progress({"status": f"pulling {f.path}", "digest": f"sha256:{f.etag}", "file_total": f.size,
                          "file_completed": n, **overall()})

            self._download(plan, f, blobs, advance, cancel)
        progress({"status": "verifying sha256 digest", **overall()})
        snapshot = self._publish(plan, folder)
        progress({"status": "writing manifest", **overall()})
        progress({"status": "success", **overall()})
        return snapshot

    @staticmethod
    def _partial(blobs: Path, f: RemoteFile) -> Path:
        return blobs / f"{f.etag}.mlx-partial"

    def _download(self, plan: Plan, f: RemoteFile, blobs: Path, advance, cancel: threading.Event) -> None:
        from huggingface_hub.utils import httpx

        target, part = blobs / f.etag, self._partial(blobs, f)
        with FileLock(str(blobs / f"{f.etag}.mlx-lock")):  # another process may be fetching the same blob
            if target.is_file():
                advance(f.size)
                return
            url = f"{self.endpoint}/{plan.repo}/resolve/{plan.sha}/{quote(f.path)}"
            headers = self.headers()
            failures = 0
            while True:
                offset = part.stat().st_size if part.exists() else 0
                if offset >= f.size:
                    break
                try:
                    with httpx.stream("GET", url, headers={**headers, "Range": f"bytes={offset}-"},
                                      timeout=httpx.Timeout(10.0, read=self.stall_timeout),
                                      follow_redirects=True) as r:
                        if r.status_code in (401, 403):
                            raise Gated(f"the Hub refused {f.path} of {plan.repo} ({r.status_code}): accept its "
                                        f"license at {self.endpoint}/{plan.repo} and set HF_TOKEN")
                        if r.status_code not in (200, 206):
                            raise PullError(f"downloading {f.path} of {plan.repo} failed: HTTP {r.status_code}")
                        mode = "ab" if r.status_code == 206 else "wb"  # a 200 means the server ignored Range
                        with part.open(mode) as out:
                            written = offset if mode == "ab" else 0
                            for chunk in r.iter_bytes():  # as received: nothing buffered is lost on a drop
                                chunk = chunk[: f.size - written]  # a body longer than listed stops at the size
                                out.write(chunk)
                                written += len(chunk)
                                failures = 0
                                advance(written)
                                if cancel.is_set():
                                    raise PullCancelled(f"pull of {plan.repo} cancelled; run it again to resume")
                                if written >= f.size:
                                    break
                except (httpx.TransportError, httpx.StreamError) as exc:
                    failures += 1
                    if failures > self.retries:
                        raise PullError(f"downloading {f.path} of {plan.repo} kept failing ({exc}); run the pull "
                                        "again to resume where it stopped") from None
                    time.sleep(self.backoff * 2 ** (failures - 1))
            if not _verify(part, f):
                part.unlink(missing_ok=True)
                raise PullError(f"{f.path} of {plan.repo} does not match the Hub's checksum (sha256:{f.etag}); the "
                                "damaged file was removed - pull again")
            os.replace(part, target)

    def _publish(self, plan: Plan, folder: Path) -> Path:
        """Link every file into snapshots/<sha>/ (the last step, so only complete snapshots exist)."""
        snapshots = folder / "snapshots"
        snapshots.mkdir(exist_ok=True)
        final = snapshots / plan.sha
        staging = snapshots / f".{plan.sha}.mlx-staging"
        shutil.rmtree(staging, ignore_errors=True)
        for f in plan.files:
            root = final if final.exists() else staging
            link = untrusted.within(snapshots, root / f.path)  # the listing was checked; this is the last guard
            if link.exists():
                continue
            link.parent.mkdir(parents=True, exist_ok=True)
            depth = len(Path(f.path).parts) + 1
            link.symlink_to(Path(*([".."] * depth)) / "blobs" / f.etag)
        if staging.exists():
            staging.rename(final)
        if plan.revision != plan.sha:
            refs = folder / "refs"
            refs.mkdir(exist_ok=True)
            (refs / plan.revision).write_text(plan.sha)
        return final


def _listed(repo: str, item) -> RemoteFile | None:
    """One entry of a tree listing, every field checked; None for folders."""
    if not isinstance(item, dict):
        raise TamperedListing(f"the Hub's file listing for {repo} holds something that is not a file entry")
    if item.get("type") != "file":
        return None
    lfs = item.get("lfs")
    if lfs is not None and not isinstance(lfs, dict):
        raise TamperedListing(f"the Hub's file listing for {repo} has a malformed `lfs` entry")
    return RemoteFile(untrusted.relative_path(repo, item.get("path")), untrusted.size(repo, item.get("size")),
                      untrusted.etag(repo, (lfs or item).get("oid")), bool(lfs))


def _verify(path: Path, f: RemoteFile) -> bool:
    digest = hashlib.sha256() if f.lfs else hashlib.sha1(b"blob %d\0" % path.stat().st_size)
    with path.open("rb") as src:
        for block in iter(lambda: src.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest() == f.etag
