"""Length-prefixed JSON messages over a Unix socket: the only link between host and sandbox worker.

JSON, not pickle: the host decodes what a (possibly compromised) worker sends, and decoding JSON cannot run
code. Frames are capped at ``max_bytes`` on receipt, so a worker cannot make the host buffer unbounded data.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from typing import Any

from metaagent.errors import MetaAgentError

HEADER = struct.Struct("!I")
#: default cap on one message (an agent call with its whole conversation, or a submitted answer)
MAX_FRAME_BYTES = 8 << 20


class ChannelError(MetaAgentError):
    """Base of the channel's failures."""


class ChannelClosed(ChannelError):
    """The other side closed the connection (a worker that died, or a host that went away)."""


class ChannelTimeout(ChannelError):
    """No complete message arrived before the deadline (what was read so far is kept)."""


class ProtocolError(ChannelError):
    """A frame that is too large or not a JSON object."""


class Channel:
    """One end of a host-worker connection. Not thread-safe: one reader and one writer at a time."""

    def __init__(self, sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.sock = sock
        self.max_bytes = max_bytes
        self._buf = bytearray()

    def send(self, message: dict[str, Any], timeout: float | None = None) -> None:
        data = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        if len(data) > self.max_bytes:
            raise ProtocolError(f"message of {len(data)} bytes exceeds the {self.max_bytes}-byte frame limit")
        self.sock.settimeout(timeout)
        try:
            self.sock.sendall(HEADER.pack(len(data)) + data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise ChannelClosed(str(e)) from None
        except TimeoutError:
            raise ChannelTimeout("the other side did not read the message in time") from None

    def recv(self, timeout: float | None = None) -> dict[str, Any]:
        """The next message; ``timeout`` bounds the whole wait (None: block)."""
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            message = self._take_frame()
            if message is not None:
                return message
            if deadline is None:
                self.sock.settimeout(None)
            else:  # past the deadline: one last non-blocking look at what already arrived
                self.sock.settimeout(max(deadline - time.monotonic(), 0.0))
            try:
                chunk = self.sock.recv(1 << 16)
            except (TimeoutError, BlockingIOError):
                raise ChannelTimeout("no message before the deadline") from None
            except (ConnectionResetError, OSError) as e:
                raise ChannelClosed(str(e)) from None
            if not chunk:
                raise ChannelClosed("connection closed")
            self._buf += chunk

    def _take_frame(self) -> dict[str, Any] | None:
        if len(self._buf) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self._buf)
        if size > self.max_bytes:
            raise ProtocolError(f"incoming frame of {size} bytes exceeds the {self.max_bytes}-byte limit")
        if len(self._buf) < HEADER.size + size:
            return None
        data = bytes(self._buf[HEADER.size : HEADER.size + size])
        del self._buf[: HEADER.size + size]
        try:
            message = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise ProtocolError(f"frame is not valid JSON: {e}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"frame must be a JSON object, got {type(message).__name__}")
        return message

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
