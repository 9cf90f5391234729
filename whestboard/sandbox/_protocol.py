"""The wire format between the app and a sandbox worker: small JSON headers, raw array bytes.

One frame = 8-byte header (JSON length, payload length; big-endian uint32) +
UTF-8 JSON + optional raw payload. Control messages are tiny JSON; the only
bulk data on the pipe is a prediction array (``depth x width`` float32, 64 KiB
at full size). Weights never travel on the pipe: they go through a file the
worker memory-maps (see :mod:`whestboard.sandbox`).

The protocol runs on dedicated file descriptors, not stdin/stdout, so a
``print()`` in ``predict`` lands in the captured output instead of corrupting
a response. The reader enforces size caps: once the estimator's code runs, the
worker end is untrusted and may write anything.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct(">II")
MAX_JSON_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 1 << 28


class ProtocolError(RuntimeError):
    """The other end sent something that is not a well-formed frame, or hung up."""


class FrameTimeout(TimeoutError):
    """No complete frame arrived within the allowed time."""


def encode(message: dict[str, Any], payload: bytes | memoryview = b"") -> bytes:
    body = json.dumps(message, separators=(",", ":"), default=str).encode("utf-8")
    return HEADER.pack(len(body), len(payload)) + body + bytes(payload)


def send(fd: int, message: dict[str, Any], payload: bytes | memoryview = b"") -> None:
    """Write one whole frame (blocking)."""
    view = memoryview(encode(message, payload))
    while view:
        written = os.write(fd, view)
        view = view[written:]


class FrameReader:
    """Reads frames from a pipe with a deadline, without threads (``select`` + non-blocking reads)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def read(self, timeout_s: float | None, *, on_wait=None, wait_slice_s: float = 0.25) -> tuple[dict, bytes]:
        """The next frame; ``on_wait()`` runs between slices (watchdogs, cancel checks)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            frame = self._take_frame()
            if frame is not None:
                return frame
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise FrameTimeout(f"no answer within {timeout_s:.1f} s")
            wait = wait_slice_s if remaining is None else min(wait_slice_s, remaining)
            ready, _, _ = select.select([self.fd], [], [], wait)
            if ready:
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    raise ProtocolError("the worker closed its end of the pipe")
                self._buffer += chunk
            elif on_wait is not None:
                on_wait()

    def _take_frame(self) -> tuple[dict, bytes] | None:
        if len(self._buffer) < HEADER.size:
            return None
        json_len, payload_len = HEADER.unpack_from(self._buffer)
        if json_len > MAX_JSON_BYTES or payload_len > MAX_PAYLOAD_BYTES:
            raise ProtocolError(f"oversized frame ({json_len} + {payload_len} bytes)")
        total = HEADER.size + json_len + payload_len
        if len(self._buffer) < total:
            return None
        body = bytes(self._buffer[HEADER.size:HEADER.size + json_len])
        payload = bytes(self._buffer[HEADER.size + json_len:total])
        del self._buffer[:total]
        try:
            message = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"malformed frame: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError("malformed frame: not a JSON object")
        return message, payload


def read_blocking(fd: int, reader: FrameReader) -> tuple[dict, bytes]:
    """Worker side: wait as long as it takes for the next command."""
    return reader.read(None, wait_slice_s=3600.0)
