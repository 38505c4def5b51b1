"""Uploaded audio to 16 kHz mono float32 samples: WAV, FLAC, MP3 and OGG Vorbis in process (miniaudio); other
containers (M4A, WebM, Opus) through ffmpeg when it is installed. Anything that is not audio is a 400."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np

from ..errors import BadRequest

RATE = 16_000
MAX_SECONDS = 4 * 3600  # decoded audio beyond this is refused: 4 h is 920 MB of samples


def decode(data: bytes, filename: str = "") -> np.ndarray:
    if not data:
        raise BadRequest("the uploaded file is empty", param="file")
    import miniaudio

    try:
        decoded = miniaudio.decode(data, output_format=miniaudio.SampleFormat.FLOAT32, nchannels=1,
                                   sample_rate=RATE)
        samples = np.frombuffer(decoded.samples, dtype=np.float32)
    except miniaudio.DecodeError:
        samples = _ffmpeg(data, filename)
    if samples.size == 0:
        raise BadRequest("the uploaded audio holds no samples", param="file")
    if samples.size > MAX_SECONDS * RATE:
        raise BadRequest(f"the uploaded audio is longer than {MAX_SECONDS // 3600} hours", param="file")
    if not np.isfinite(samples).all():
        raise BadRequest("the uploaded audio holds samples that are not numbers", param="file")
    return samples


IN_PROCESS = ("wav", "wave", "flac", "mp3", "ogg", "oga")


def _ffmpeg(data: bytes, filename: str) -> np.ndarray:
    ffmpeg = shutil.which("ffmpeg")
    kind = filename.rsplit(".", 1)[-1].lower() if "." in filename else "this format"
    container = data[4:8] == b"ftyp" or data[:4] == b"\x1a\x45\xdf\xa3"  # MP4/M4A, WebM/Matroska
    if ffmpeg is None and (kind in IN_PROCESS or not container):
        raise BadRequest(f"the uploaded file is not {kind.upper() if kind in IN_PROCESS else 'audio'} that can be "
                         "decoded (WAV, FLAC, MP3 and OGG are read here; M4A and WebM need ffmpeg)", param="file")
    if ffmpeg is None:
        raise BadRequest(f"cannot decode {kind} audio here: WAV, FLAC, MP3 and OGG are read in process; install "
                         "ffmpeg for M4A, WebM and Opus", param="file")
    try:
        run = subprocess.run([ffmpeg, "-nostdin", "-loglevel", "error", "-i", "pipe:0", "-f", "f32le", "-ac", "1",
                              "-ar", str(RATE), "-t", str(MAX_SECONDS), "pipe:1"], input=data, capture_output=True,
                             timeout=600)
    except subprocess.TimeoutExpired:
        raise BadRequest("decoding the uploaded audio took too long", param="file") from None
    if run.returncode != 0:
        raise BadRequest("the uploaded file is not audio that ffmpeg can decode", param="file")
    return np.frombuffer(run.stdout, dtype=np.float32)
