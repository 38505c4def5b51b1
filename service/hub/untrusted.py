"""What a Hub server sends is untrusted input, like a request body: `HF_ENDPOINT` may point at any mirror.

Every part of a cache path that comes from a server (a listed file's path, the commit sha, a blob's etag) and
every number (a file's size) is checked here before it is used, and every final path is checked to lie inside
the folder it belongs to before anything is written, linked or deleted there. A check that fails is a
`TamperedListing` naming the repo and the value, never a traceback.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import ServiceError

_SHA = re.compile(r"^[0-9a-f]{40}$")
_ETAG = re.compile(r"^[0-9a-f]{40}$|^[0-9a-f]{64}$")
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
MAX_FILE_BYTES = 1 << 44  # 16 TiB: no checkpoint file is larger
MAX_FILES = 100_000


class TamperedListing(ServiceError):
    """The Hub (or a mirror) answered something no real Hub can: refused before it touches the disk."""

    status = 502
    openai_type = "server_error"
    anthropic_type = "api_error"


def _refuse(repo: str, what: str, value: Any) -> TamperedListing:
    absolute = isinstance(value, str) and (value.startswith("/") or re.match(r"^[A-Za-z]:", value))
    shown = "(an absolute path)" if absolute else repr(value)[:120]
    return TamperedListing(f"the Hub's answer for {repo} is not usable: {what} {shown} "
                           f"(is HF_ENDPOINT a trustworthy mirror?)")


def repo_id(repo: str) -> str:
    """A repo id as a cache folder may be named after it: `org/name`, no path tricks."""
    if not isinstance(repo, str) or not _REPO.match(repo) or ".." in repo:
        raise _refuse(str(repo)[:100], "invalid repo id", repo)
    return repo


def commit(repo: str, sha: Any) -> str:
    if not isinstance(sha, str) or not _SHA.match(sha):
        raise _refuse(repo, "the revision's commit is not a 40-hex sha:", sha)
    return sha


def revision(repo: str, name: Any) -> str:
    """A branch or tag name, as `refs/<name>` is written."""
    if not isinstance(name, str) or not _REVISION.match(name) or ".." in name or "//" in name \
            or name.endswith("/"):
        raise _refuse(repo, "invalid revision name", name)
    return name


def etag(repo: str, value: Any) -> str:
    if not isinstance(value, str) or not _ETAG.match(value):
        raise _refuse(repo, "a file's checksum is not a sha1 or sha256 hex digest:", value)
    return value


def size(repo: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FILE_BYTES:
        raise _refuse(repo, "a file's size is not a byte count:", value)
    return value


def relative_path(repo: str, value: Any) -> str:
    """A listed file's path: relative, '/'-separated, no '.', '..', empty or over-long parts, no NUL."""
    if not isinstance(value, str) or not value or len(value) > 1024 or "\0" in value or "\\" in value:
        raise _refuse(repo, "invalid file path", value)
    parts = value.split("/")
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value) or any(
            p in ("", ".", "..") or len(p.encode()) > 255 for p in parts):
        raise _refuse(repo, "a file path outside the repo:", value)
    return value


def within(root: Path, path: Path) -> Path:
    """`path`, if it lies inside `root` (without following a final symlink); else a refusal."""
    base = os.path.realpath(root)
    parent = os.path.realpath(path.parent)
    if os.path.commonpath([base, os.path.join(parent, path.name)]) != base or path.name in ("", ".", ".."):
        raise TamperedListing(f"refused to touch {path.name!r}: it is not inside the folder it belongs to")
    return path
