"""Images in requests: data URLs and base64 decoded, http(s) URLs fetched (size and time limited, never
`file:`), and every image opened once to check it is one, before a model is loaded for it."""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import re
from dataclasses import replace

from ..engine.job import Job
from ..engine.request import Image
from ..errors import BadRequest, PayloadTooLarge

MAX_IMAGES = 16  # per request
MAX_PIXELS = 64_000_000  # a decompression bomb is refused before it is decoded
_DATA_URL = re.compile(r"^data:image/[a-zA-Z0-9.+-]+;base64,(.*)$", re.S)


def from_url(url: object, where: str) -> Image:
    """An OpenAI/Anthropic image URL: a base64 data URL, or http(s) to fetch later."""
    if not isinstance(url, str) or not url:
        raise BadRequest(f"{where}: the image URL must be a non-empty string", param=where)
    match = _DATA_URL.match(url)
    if match:
        return from_base64(match.group(1), where)
    if url.startswith(("http://", "https://")):
        return Image(url=url)
    raise BadRequest(f"{where}: images are base64 data URLs (data:image/png;base64,...) or http(s) URLs",
                     param=where)


def from_base64(text: object, where: str) -> Image:
    if not isinstance(text, str) or not text:
        raise BadRequest(f"{where}: the image must be base64 text", param=where)
    try:
        return Image(data=base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        raise BadRequest(f"{where}: the image is not valid base64", param=where) from None


async def load_images(job: Job, limit: int) -> Job:
    """`job` with every image's bytes at hand and checked: fetched, within `limit` bytes, a real image."""
    if not job.images:
        return job
    if len(job.images) > MAX_IMAGES:
        raise BadRequest(f"a request may hold at most {MAX_IMAGES} images, not {len(job.images)}")
    loaded = []
    for i, image in enumerate(job.images):
        data = image.data if image.data is not None else await _fetch(image.url, limit, i)
        if len(data) > limit:
            raise PayloadTooLarge(f"image {i + 1} is {len(data):,} bytes, over the {limit:,}-byte limit "
                                  "(MLX_SERVICE_MAX_IMAGE_BYTES)")
        await asyncio.to_thread(_check, data, i)
        loaded.append(Image(data=data))
    return replace(job, images=tuple(loaded))


async def _fetch(url: str, limit: int, index: int) -> bytes:
    import httpx

    try:
        async with httpx.AsyncClient(timeout=10, follow_redirects=True, max_redirects=3) as client:
            async with client.stream("GET", url) as r:
                if r.status_code != 200:
                    raise BadRequest(f"image {index + 1}: fetching it answered HTTP {r.status_code}")
                chunks, size = [], 0
                async for chunk in r.aiter_bytes():
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(f"image {index + 1} is over the {limit:,}-byte limit "
                                              "(MLX_SERVICE_MAX_IMAGE_BYTES)")
                    chunks.append(chunk)
                return b"".join(chunks)
    except httpx.HTTPError as exc:
        raise BadRequest(f"image {index + 1}: could not fetch it ({type(exc).__name__})") from None


def _check(data: bytes, index: int) -> None:
    from PIL import Image as PILImage

    try:
        with PILImage.open(io.BytesIO(data)) as img:
            if img.width * img.height > MAX_PIXELS:
                raise BadRequest(f"image {index + 1} is {img.width}x{img.height} pixels: too large to read")
            img.verify()
    except BadRequest:
        raise
    except Exception:  # PIL raises many kinds of errors for broken input
        raise BadRequest(f"image {index + 1} is not an image that can be read (PNG, JPEG, WebP, GIF, ...)") from None
