"""Asyncio client of the Chorus server, protocol version 1 (``docs/protocol.md``).

Streams (``/v1/stream``)::

    async with chorus.client.connect("ws://127.0.0.1:8080", n_q=8) as stream:
        pcm = await stream.decode(codes)            # codes [n_q, T] -> float32 [T * 1920]

        await stream.send(codes[:, :4])             # one or more frames
        first = await stream.recv()                 # float32 [1920], in frame order
        await stream.close()                        # the frames already sent are still delivered
        rest = [frame async for frame in stream]

Music (``/v1/music``)::

    async for frame in chorus.client.music("ws://127.0.0.1:8080", prompt_ids=ids, seconds=10):
        print(frame.index, frame.codes)

Whole files over HTTP: :func:`decode_http`, :func:`music_http`, :func:`health`, :func:`metrics`.

Server errors raise :class:`ChorusError` (``.code`` is the protocol's error code); input this
client can check before sending raises :class:`ValueError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import itertools
import json
import struct
import wave
from collections import deque
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Deque,
    Dict,
    Generator,
    Generic,
    List,
    Mapping,
    Optional,
    Tuple,
    Type,
    TypeVar,
    Union,
)
from urllib.parse import urlencode, urlsplit, urlunsplit

import numpy as np
import numpy.typing as npt
from websockets import exceptions as _ws_exceptions
from websockets.exceptions import ConnectionClosed
from websockets.version import version as _websockets_version


def _version(text: str) -> Tuple[int, ...]:
    """The leading numbers of a version string: ``"14.1"`` -> ``(14, 1)``."""
    numbers: List[int] = []
    for part in text.split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


# Before 14.1 the asyncio client drops messages still buffered when the close frame arrives
# (such as a stream's `closed`); the legacy client keeps them.
_MODERN_WEBSOCKETS = _version(_websockets_version) >= (14, 1)
if _MODERN_WEBSOCKETS:
    from websockets.asyncio.client import connect as _ws_connect
else:
    from websockets.legacy.client import connect as _ws_connect  # type: ignore[assignment]

__all__ = [
    "PROTOCOL_VERSION",
    "SAMPLE_RATE",
    "FRAME_SAMPLES",
    "MUSIC_LEVELS",
    "MUSIC_FRAME_RATE",
    "ChorusError",
    "BusyError",
    "DrainingError",
    "StreamClosed",
    "Opening",
    "MusicOpening",
    "Stream",
    "MusicStream",
    "MusicFrame",
    "MusicResult",
    "connect",
    "music",
    "decode_http",
    "music_http",
    "health",
    "metrics",
    "wait_ready",
]

PROTOCOL_VERSION = 1
"""The protocol version this client speaks."""
SAMPLE_RATE = 24_000
"""Samples per second of the PCM the server sends."""
FRAME_SAMPLES = 1920
"""Samples of one 80 ms frame."""
MUSIC_LEVELS = 8
"""Codes per music frame: the semantic code, then 7 residual levels."""
MUSIC_FRAME_RATE = 25
"""Music frames per second of song."""

_MUSIC_MIN_SECONDS = 1.0
_MUSIC_MAX_SECONDS = 360.0
_MUSIC_MIN_PROMPT = 3
_MUSIC_MAX_PROMPT = 5_000
_MUSIC_SAMPLING = ("seeded", "greedy", "noise")
_PCM_FORMATS = ("f32", "s16")
_S16_SCALE = 32767.0
_U16_MAX = 0xFFFF
_U32_MASK = 0xFFFF_FFFF
_U64_MAX = 2**64 - 1
# A hiddens message of the real music model is 64 KiB; leave room for larger models.
_MAX_MESSAGE_BYTES = 1 << 24
# The server lingers 2 s for our close reply; waiting a little longer is enough.
_CLOSE_TIMEOUT_S = 5.0
_DEFAULT_HTTP_TIMEOUT_S = 10.0

# Close codes the server sends after each error code (protocol.md, "Error codes").
_ERROR_CLOSE_CODES = {"busy": 1013, "draining": 1001, "decode_failed": 1011, "internal": 1011}
# Error codes for a close frame that came without an error message.
_CLOSE_CODE_ERRORS = {1001: "draining", 1008: "policy", 1011: "internal", 1013: "busy"}

_T = TypeVar("_T", bound="_Connection")
_R = TypeVar("_R")


# --------------------------------------------------------------------------------------------
# Errors


class ChorusError(Exception):
    """An error the server reported, or the end of a stream seen by a call that needed more.

    ``code`` is the protocol's machine-readable error code (``"busy"``, ``"code_out_of_range"``,
    ``"bad_request"``, ...). This client adds a few of its own: ``"closed"`` (the stream ended:
    see :class:`StreamClosed`), ``"disconnected"`` (the connection dropped without a close frame),
    ``"protocol"`` (the server sent something this client does not understand), ``"http"`` (an
    HTTP error without a JSON body) and, for a close frame that carried no error message, the
    close frame's reason or ``"policy"``/``"internal"``.
    """

    def __init__(
        self,
        code: str,
        message: str,
        *,
        close_code: Optional[int] = None,
        status: Optional[int] = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code: str = code
        """The protocol's error code."""
        self.message: str = message
        """The server's message, for people."""
        self.close_code: Optional[int] = close_code
        """The WebSocket close code that ended the connection, when there was one."""
        self.status: Optional[int] = status
        """The HTTP status, for errors of the HTTP endpoints."""


class BusyError(ChorusError):
    """Every stream or song slot is taken (``busy``, close code 1013 or HTTP 503): retry later."""


class DrainingError(ChorusError):
    """The server is shutting down (``draining``, close code 1001 or HTTP 503).

    On a stream it means that the server ended the stream before the client did: every PCM frame
    received is valid, and a client that wants the rest reconnects elsewhere and resends the
    frames from :attr:`Stream.frames_received` on.
    """


class StreamClosed(ChorusError):
    """The stream or song has ended normally and holds no more frames (code ``"closed"``)."""


def _error(
    code: str,
    message: str,
    *,
    close_code: Optional[int] = None,
    status: Optional[int] = None,
) -> ChorusError:
    """The exception for a protocol error code."""
    cls: Type[ChorusError] = ChorusError
    if code == "busy":
        cls = BusyError
    elif code == "draining":
        cls = DrainingError
    return cls(code, message, close_code=close_code, status=status)


def _server_error(msg: Mapping[str, Any]) -> ChorusError:
    """The exception for the server's ``error`` message."""
    code = str(msg.get("code"))
    return _error(code, str(msg.get("message")), close_code=_ERROR_CLOSE_CODES.get(code, 1008))


async def _close_after_error(ws: Any, err: ChorusError) -> None:
    """Completes the close the server starts after an error; its close frame has the code."""
    err.close_code = await _ws_close(ws) or err.close_code


def _protocol_error(message: str) -> ChorusError:
    return ChorusError("protocol", message)


def _closed_error(exc: ConnectionClosed) -> ChorusError:
    """The exception for a connection that closed without an error message."""
    rcvd = exc.rcvd
    if rcvd is None or rcvd.code == 1006:
        return ChorusError("disconnected", "the connection was lost", close_code=None)
    # The server's close reason is the error code word when it has one.
    code = (
        rcvd.reason if rcvd.reason.isidentifier() else _CLOSE_CODE_ERRORS.get(rcvd.code, "closed")
    )
    return _error(
        code,
        f"the server closed the connection with code {rcvd.code}"
        + (f" ({rcvd.reason})" if rcvd.reason else ""),
        close_code=rcvd.code,
    )


# --------------------------------------------------------------------------------------------
# URLs and the WebSocket


def _endpoint_url(
    url: str, path: str, *, websocket: bool, query: Optional[Mapping[str, str]] = None
) -> str:
    """``url`` with its scheme set for the transport, ``path`` appended unless already there and
    ``query`` added to its own."""
    parts = urlsplit(url)
    schemes = {"ws": ("ws", "http"), "http": ("ws", "http"), "wss": ("wss", "https")}
    schemes["https"] = schemes["wss"]
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"expected a ws://, wss://, http:// or https:// URL, got {url!r}")
    scheme = schemes[parts.scheme][0 if websocket else 1]
    base = parts.path.rstrip("/")
    full = base if base.endswith(path) else base + path
    extra = urlencode(query or {})
    joined = "&".join(q for q in (parts.query, extra) if q)
    return urlunsplit((scheme, parts.netloc, full, joined, ""))


def _invalid_status_types() -> Tuple[Type[BaseException], ...]:
    names = ["InvalidStatus"] if _MODERN_WEBSOCKETS else ["InvalidStatus", "InvalidStatusCode"]
    found = (getattr(_ws_exceptions, name, None) for name in names)
    return tuple(t for t in found if isinstance(t, type))


_INVALID_STATUS = _invalid_status_types()


async def _ws_open(url: str, open_timeout: Optional[float]) -> Any:
    """Connects a WebSocket; an HTTP refusal becomes a :class:`ChorusError`."""
    try:
        return await _ws_connect(
            url,
            open_timeout=open_timeout,
            close_timeout=_CLOSE_TIMEOUT_S,
            max_size=_MAX_MESSAGE_BYTES,
            # Audio and codes do not compress, and the server does not negotiate it anyway.
            compression=None,
        )
    except _INVALID_STATUS as exc:
        response = getattr(exc, "response", None)
        status = getattr(response, "status_code", None) or getattr(exc, "status_code", None)
        body = bytes(getattr(response, "body", None) or b"")
        if not body:
            # The legacy client keeps no body: ask again over plain HTTP for the JSON error.
            with contextlib.suppress(OSError, ChorusError, asyncio.TimeoutError):
                plain = _endpoint_url(url, "", websocket=False)
                resp = await _http("GET", plain, timeout=open_timeout)
                if resp.status == status:
                    body = resp.body
        raise _http_error(status or 0, body) from None


async def _ws_close(ws: Any) -> Optional[int]:
    """Closes ``ws`` (a close handshake at most ``_CLOSE_TIMEOUT_S`` long); the peer's code."""
    with contextlib.suppress(ConnectionClosed, OSError):
        await ws.close()
    code = getattr(ws, "close_code", None)
    return None if code == 1006 else code


async def _recv_or_timeout(coro: Awaitable[_R], timeout: Optional[float]) -> _R:
    if timeout is None:
        return await coro
    return await asyncio.wait_for(coro, timeout)


async def _handshake(
    url: str,
    request: Mapping[str, Any],
    expect: str,
    open_timeout: Optional[float],
    reply_timeout: Optional[float],
) -> Tuple[Any, Dict[str, Any]]:
    """Connects, sends ``request`` and returns the connection with its ``expect`` reply; a
    refusal raises the server's error (the connection closed either way)."""
    ws = await _ws_open(url, open_timeout)
    try:
        await ws.send(json.dumps(request))
        reply = await _recv_or_timeout(ws.recv(), reply_timeout)
    except ConnectionClosed as exc:
        raise _closed_error(exc) from None
    except BaseException:
        await _ws_close(ws)
        raise
    try:
        msg = _parse_json(reply)
        if msg.get("type") == "error":
            err = _server_error(msg)
            await _close_after_error(ws, err)
            raise err
        if msg.get("type") != expect:
            raise _protocol_error(f"expected `{expect}`, got {reply!r:.200}")
        return ws, msg
    except BaseException:
        await _ws_close(ws)
        raise


class _Connection:
    """What :class:`Opening` manages: something with an abrupt :meth:`abort`."""

    async def abort(self) -> None:
        raise NotImplementedError


class Opening(Generic[_T]):
    """What :func:`connect` and :func:`music` return: awaitable and an async context manager.

    ``await`` gives the open connection (the caller ends it); ``async with`` gives it and drops
    it on the way out (nothing to do when it has already ended).
    """

    def __init__(self, open_fn: Callable[[], Awaitable[_T]]) -> None:
        self._open_fn = open_fn
        self._conn: Optional[_T] = None

    def __await__(self) -> Generator[Any, None, _T]:
        return self._open_fn().__await__()

    async def __aenter__(self) -> _T:
        self._conn = await self._open_fn()
        return self._conn

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._conn is not None:
            await self._conn.abort()


# --------------------------------------------------------------------------------------------
# Streams: /v1/stream


class Stream(_Connection):
    """One open decoding stream of ``/v1/stream``. Made by :func:`connect`.

    Every PCM frame is a float32 array of :attr:`frame_samples` samples (s16 streams are scaled
    by ``1 / 32767``). Frames come back in the order they were sent, across resets.

    One task may send while another receives: reads are serialised inside the stream, and
    :meth:`send` keeps the frames in flight within the server's ``max_pending_frames`` by
    reading PCM ahead into an internal buffer (so it never causes ``queue_full``).
    """

    def __init__(self, ws: Any, opened: Mapping[str, Any]) -> None:
        self._ws = ws
        self.opened: Dict[str, Any] = dict(opened)
        """The server's ``opened`` message."""
        self.stream_id: int = int(opened["stream_id"])
        """The server's id of this stream."""
        self.latents: bool = opened["input"] == "latents"
        """Whether the stream takes latents rather than codes."""
        self.n_q: Optional[int] = opened.get("n_q")
        """Codebooks per frame (``None`` on a latents stream)."""
        self.pcm: str = str(opened["pcm"])
        """The wire sample format: ``"f32"`` or ``"s16"``."""
        self.sample_rate: int = int(opened["sample_rate"])
        """PCM samples per second."""
        self.frame_samples: int = int(opened["frame_samples"])
        """Samples per PCM frame."""
        self.codebook_size: int = int(opened["codebook_size"])
        """Every code must be below this."""
        self.latent_dim: int = int(opened["latent_dim"])
        """Floats per latent frame."""
        self.max_pending_frames: int = int(opened["max_pending_frames"])
        """How far ahead of the decoder the client may be (frames and resets)."""
        self.max_frames_per_message: int = int(opened["max_frames_per_message"])
        """Most frames in one binary message."""
        self._sample_dtype = np.dtype("<f4") if self.pcm == "f32" else np.dtype("<i2")
        self._pcm_bytes = 4 + self.frame_samples * self._sample_dtype.itemsize
        self._buffer: Deque[npt.NDArray[np.float32]] = deque()
        self._reset_acks: Deque[int] = deque()
        self._sent = 0
        self._read = 0
        self._resets_unacked = 0
        self._closing = False
        self._got_closed = False
        self._closed_frames: Optional[int] = None
        self._done = False
        self._terminal: Optional[ChorusError] = None
        self._read_lock = asyncio.Lock()
        self._send_lock = asyncio.Lock()

    @classmethod
    async def _open(
        cls,
        url: str,
        open_msg: Mapping[str, Any],
        open_timeout: Optional[float],
    ) -> Stream:
        ws, msg = await _handshake(url, open_msg, "opened", open_timeout, open_timeout)
        return cls(ws, msg)

    # -- state ----------------------------------------------------------------------------

    @property
    def frames_sent(self) -> int:
        """Frames sent since the stream opened."""
        return self._sent

    @property
    def frames_received(self) -> int:
        """PCM frames received from the server (including those still buffered for :meth:`recv`)."""
        return self._read

    @property
    def in_flight(self) -> int:
        """Frames and resets sent whose answer has not been read yet."""
        return self._sent + self._resets_unacked - self._read

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (buffered frames may still be read)."""
        return self._done

    # -- sending --------------------------------------------------------------------------

    def _encode(self, frames: npt.ArrayLike, validate: bool) -> Tuple[bytes, int, int]:
        """The wire bytes of ``frames``, their frame count and the bytes of one frame."""
        arr = np.asarray(frames)
        what = "latents" if self.latents else "codes"
        if arr.ndim == 1:
            arr = arr[:, None]
        if arr.ndim != 2:
            raise ValueError(f"{what} must be [rows] or [rows, frames], got shape {arr.shape}")
        rows = self.latent_dim if self.latents else int(self.n_q or 0)
        if validate and arr.shape[0] != rows:
            raise ValueError(
                f"{what} have {arr.shape[0]} rows but this stream takes {rows} per frame"
            )
        if arr.size == 0:
            raise ValueError(f"no {what} to send: shape {arr.shape}")
        if self.latents:
            if arr.dtype.kind not in "fiu":
                raise ValueError(f"latents must be real numbers, got dtype {arr.dtype}")
            wire = arr.T.astype("<f4")
            if validate and not np.isfinite(wire).all():
                raise ValueError("latents must be finite (no NaN or infinity)")
        else:
            if arr.dtype.kind not in "iu":
                raise ValueError(f"codes must be integers, got dtype {arr.dtype}")
            limit = self.codebook_size if validate else _U16_MAX + 1
            low, high = int(arr.min()), int(arr.max())
            if low < 0 or high >= limit:
                bad = low if low < 0 else high
                raise ValueError(f"code {bad} is outside [0, {limit})")
            wire = arr.T.astype("<u2")
        return np.ascontiguousarray(wire).tobytes(), arr.shape[1], arr.shape[0] * wire.itemsize

    def _check_open_for_sending(self) -> None:
        if self._done:
            assert self._terminal is not None
            raise self._terminal
        if self._closing:
            raise StreamClosed("closed", "the stream was closed: it takes no more input")

    async def send(self, frames: npt.ArrayLike, *, validate: bool = True) -> int:
        """Sends one frame or several; returns the number of frames sent.

        Codes: integers ``[n_q]`` (one frame) or ``[n_q, k]`` (``k`` frames, codebook-major as
        Mimi's ``[n_q, T]``), or a list of ``n_q`` ints. Latents (a stream opened with
        ``latents=True``): floats ``[latent_dim]`` or ``[latent_dim, k]``.

        Raises :class:`ValueError` before sending anything for a wrong shape or dtype, a code
        outside ``[0, codebook_size)`` or a non-finite latent; ``validate=False`` skips the
        shape, range and finiteness checks so that the server judges the input (codes must still
        fit in 16 bits). Waits, reading PCM ahead, while more would be in flight than the
        server's ``max_pending_frames``. Raises the stream's :class:`ChorusError` if the server
        has ended it.
        """
        payload, count, frame_bytes = self._encode(frames, validate)
        await self._send_frames(payload, count, frame_bytes)
        return count

    async def _send_frames(self, payload: bytes, count: int, frame_bytes: int) -> None:
        step = max(1, min(self.max_frames_per_message, self.max_pending_frames))
        async with self._send_lock:
            self._check_open_for_sending()
            for start in range(0, count, step):
                n = min(step, count - start)
                await self._wait_for_room(n)
                await self._ws_send(payload[start * frame_bytes : (start + n) * frame_bytes])
                self._sent += n

    async def _wait_for_room(self, frames: int) -> None:
        """Reads PCM ahead until ``frames`` more fit within ``max_pending_frames``."""
        limit = self.max_pending_frames - frames
        await self._wait_until(lambda: self.in_flight <= limit)

    async def _ws_send(self, message: Union[str, bytes]) -> None:
        try:
            await self._ws.send(message)
        except ConnectionClosed:
            # The server ended the stream: its error message is still to be read.
            await self._wait_until(lambda: False)

    async def reset(self) -> int:
        """Resets the stream: frames sent after it decode as if the stream had just opened.

        Waits until the server has applied it (PCM of the frames before it is buffered for
        :meth:`recv`) and returns the index of the first frame decoded from the zero state.
        Frame numbering continues across resets.
        """
        async with self._send_lock:
            self._check_open_for_sending()
            await self._wait_for_room(1)
            await self._ws_send(json.dumps({"type": "reset"}))
            self._resets_unacked += 1
            await self._wait_until(lambda: bool(self._reset_acks))
            return self._reset_acks.popleft()

    async def close(self) -> int:
        """Ends the stream gracefully and returns the number of frames the stream sent.

        Every frame already sent is still decoded: its PCM is buffered and returned by
        :meth:`recv` and the async iterator, which stops after the last one. Raises
        :class:`DrainingError` if the server shut down before delivering every frame, or the
        stream's :class:`ChorusError` if it had failed.
        """
        async with self._send_lock:
            if not self._done and not self._closing:
                self._closing = True
                with contextlib.suppress(ConnectionClosed):
                    await self._ws.send(json.dumps({"type": "close"}))
            # Whether the end was normal is decided below: a normal end returns, else it raises.
            with contextlib.suppress(ChorusError):
                await self._wait_until(lambda: self._done)
        assert self._terminal is not None
        if isinstance(self._terminal, StreamClosed):
            return self._closed_frames if self._closed_frames is not None else self._sent
        raise self._terminal

    async def abort(self) -> None:
        """Closes the connection at once: frames not yet decoded are discarded."""
        if not self._done:
            self._done = True
            self._terminal = StreamClosed("closed", "the stream was aborted")
            await _ws_close(self._ws)

    # -- receiving ------------------------------------------------------------------------

    async def recv(self, timeout: Optional[float] = None) -> npt.NDArray[np.float32]:
        """The next PCM frame: float32 ``[frame_samples]``.

        Raises :class:`StreamClosed` once a closed stream has delivered every frame, the
        stream's :class:`ChorusError` (after the frames received before it) if the server ended
        it, and :class:`asyncio.TimeoutError` after ``timeout`` seconds.
        """
        return await _recv_or_timeout(self._next_frame(), timeout)

    async def _next_frame(self) -> npt.NDArray[np.float32]:
        await self._wait_until(lambda: bool(self._buffer))
        # No await between the check and the pop: no other reader can take this frame.
        return self._buffer.popleft()

    def __aiter__(self) -> AsyncIterator[npt.NDArray[np.float32]]:
        return self

    async def __anext__(self) -> npt.NDArray[np.float32]:
        try:
            return await self.recv()
        except StreamClosed:
            raise StopAsyncIteration from None

    async def decode(self, frames: npt.ArrayLike) -> npt.NDArray[np.float32]:
        """Decodes ``[n_q, T]`` codes (or ``[latent_dim, T]`` latents): float32 ``[T * 1920]``.

        Sending and receiving are pipelined: up to ``max_pending_frames`` frames are in flight.
        The stream must have no frame in flight or buffered; it stays open afterwards and its
        decoder state continues from the last frame (``reset()`` first for a fresh start).
        """
        if self.in_flight or self._buffer:
            raise RuntimeError(
                "decode() needs a stream with nothing in flight: recv() the pending frames first"
            )
        arr = np.asarray(frames)
        if arr.ndim != 2:
            raise ValueError(f"decode() takes [rows, T] frames, got shape {arr.shape}")
        payload, total, frame_bytes = self._encode(arr, True)
        out = np.empty(total * self.frame_samples, dtype=np.float32)
        window = max(1, min(self.max_pending_frames, self.max_frames_per_message))
        sent = got = 0
        while got < total:
            room = window - self.in_flight
            if sent < total and room > 0:
                n = min(room, total - sent)
                await self._send_frames(
                    payload[sent * frame_bytes : (sent + n) * frame_bytes], n, frame_bytes
                )
                sent += n
                continue
            out[got * self.frame_samples : (got + 1) * self.frame_samples] = await self.recv()
            got += 1
        return out

    async def _wait_until(self, ready: Callable[[], bool]) -> None:
        """Reads messages until ``ready()``; raises the terminal error once nothing can arrive."""
        while not ready():
            async with self._read_lock:
                if ready():
                    return
                if self._done:
                    assert self._terminal is not None
                    raise self._terminal
                await self._read_one()

    async def _read_one(self) -> None:
        """Reads and handles one message (the caller holds the read lock)."""
        try:
            msg = await self._ws.recv()
        except ConnectionClosed as exc:
            self._on_connection_closed(exc)
            return
        if isinstance(msg, (bytes, bytearray, memoryview)):
            self._on_pcm(bytes(msg))
        else:
            await self._on_control(msg)

    def _on_pcm(self, data: bytes) -> None:
        if len(data) != self._pcm_bytes:
            raise self._fail(
                _protocol_error(f"PCM message of {len(data)} bytes, expected {self._pcm_bytes}")
            )
        (index,) = struct.unpack_from("<I", data)
        if index != self._read & _U32_MASK:
            raise self._fail(
                _protocol_error(f"PCM frame {index} arrived, expected {self._read & _U32_MASK}")
            )
        samples = np.frombuffer(data, dtype=self._sample_dtype, offset=4).astype(np.float32)
        if self.pcm == "s16":
            samples /= np.float32(_S16_SCALE)
        self._read += 1
        self._buffer.append(samples)

    async def _on_control(self, text: str) -> None:
        try:
            msg = _parse_json(text)
        except ChorusError as err:
            raise self._fail(err) from None
        kind = msg.get("type")
        if kind == "reset_done":
            self._resets_unacked -= 1
            self._reset_acks.append(int(msg["next_frame"]))
        elif kind == "closed":
            self._got_closed = True
            self._closed_frames = int(msg["frames"])
        elif kind == "error":
            # State first: the close handshake below may be cancelled by a timeout.
            self._done = True
            self._terminal = _server_error(msg)
            await _close_after_error(self._ws, self._terminal)
        else:
            raise self._fail(_protocol_error(f"unexpected message {text!r:.200}"))

    def _on_connection_closed(self, exc: ConnectionClosed) -> None:
        self._done = True
        if self._terminal is not None:
            return
        rcvd = exc.rcvd
        close_code = rcvd.code if rcvd is not None else None
        if not self._got_closed:
            self._terminal = _closed_error(exc)
        elif not self._closing or (close_code == 1001 and self._read < self._sent):
            self._terminal = DrainingError(
                "draining",
                f"the server is shutting down: {self._read} of {self._sent} frames were "
                f"decoded; resend from frame {self._read} elsewhere",
                close_code=close_code,
            )
        else:
            self._terminal = StreamClosed("closed", "the stream has ended", close_code=close_code)

    def _fail(self, err: ChorusError) -> ChorusError:
        """Ends the stream with ``err`` (its connection is dropped) and returns it."""
        self._done = True
        self._terminal = err
        # Only the transport is dropped here: a close handshake needs awaiting.
        transport = getattr(self._ws, "transport", None)
        if transport is not None:
            transport.abort()
        return err


def connect(
    url: str,
    n_q: Optional[int] = None,
    *,
    latents: bool = False,
    pcm: str = "f32",
    open_timeout: Optional[float] = 10.0,
) -> Opening[Stream]:
    """Opens a decoding stream on ``/v1/stream``.

    ``url`` is the server (``ws://host:port``; ``http://`` works too) or the endpoint itself.
    A codes stream takes ``n_q`` codebooks per frame (default 8; the server refuses more than
    the model has with ``bad_open``); ``latents=True`` opens a latents stream instead (no
    ``n_q``). ``pcm`` is the wire format: ``"f32"`` (default, exactly the decoder's output) or
    ``"s16"`` (half the bytes); :meth:`Stream.recv` returns float32 either way.

    Use as ``async with connect(...) as stream:`` (the connection is dropped on the way out;
    call :meth:`Stream.close` first to receive every frame) or ``stream = await connect(...)``.
    Raises :class:`BusyError` when every slot is taken, :class:`ChorusError` for other refusals
    and :class:`ValueError` for options this client can check.
    """
    if latents and n_q is not None:
        raise ValueError("a latents stream takes no n_q")
    if pcm not in _PCM_FORMATS:
        raise ValueError(f"pcm must be one of {_PCM_FORMATS}, got {pcm!r}")
    msg: Dict[str, Any] = {"type": "open", "version": PROTOCOL_VERSION}
    if latents:
        msg["input"] = "latents"
    else:
        n_q = 8 if n_q is None else n_q
        if isinstance(n_q, bool) or not isinstance(n_q, (int, np.integer)) or n_q < 1:
            raise ValueError(f"n_q must be a positive integer, got {n_q!r}")
        msg["input"] = "codes"
        msg["n_q"] = int(n_q)
    msg["pcm"] = pcm
    endpoint = _endpoint_url(url, "/v1/stream", websocket=True)
    return Opening(lambda: Stream._open(endpoint, msg, open_timeout))


# --------------------------------------------------------------------------------------------
# Music: /v1/music


@dataclasses.dataclass(frozen=True)
class MusicFrame:
    """One generated music frame."""

    index: int
    """Frame number, from 0."""
    codes: npt.NDArray[np.int32]
    """``[8]``: the semantic code (below 16,384), then 7 residual codes (below 1,024)."""
    hiddens: Optional[npt.NDArray[np.float32]] = None
    """``[8, hidden_size]`` (bf16 values widened exactly), when asked for with ``hiddens=True``."""


@dataclasses.dataclass(frozen=True)
class MusicResult:
    """A whole song: what :func:`music_http` and :meth:`MusicStream.collect` return."""

    codes: npt.NDArray[np.int32]
    """``[T, 8]``."""
    hiddens: Optional[npt.NDArray[np.float32]]
    """``[T, 8, hidden_size]``, when asked for."""
    song: int
    """The server's id of the song."""
    prompt_tokens: int
    """Tokens of the conditional prompt row."""
    reason: str
    """Why the song ended: ``"end"``, ``"max_frames"`` or ``"cancelled"``."""
    metadata: Dict[str, str] = dataclasses.field(default_factory=dict)
    """The safetensors metadata (HTTP only): ``seed``, ``sampling``, ``frame_rate``, ..."""

    @property
    def frames(self) -> int:
        """Frames in the song."""
        return int(self.codes.shape[0])


def _bf16_to_f32(bits: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    """bf16 bit patterns widened to float32 (exact: bf16 is the top half of an f32)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _start_request(
    *,
    prompt_ids: Optional[npt.ArrayLike],
    caption: Optional[str],
    lyrics: Optional[str],
    seconds: float,
    max_frames: Optional[int],
    seed: Optional[int],
    sampling: Optional[str],
    allow_end: Optional[bool],
    hiddens: Optional[bool],
) -> Dict[str, Any]:
    """The ``start`` fields, checked as far as the protocol fixes them."""
    req: Dict[str, Any] = {}
    if prompt_ids is not None:
        if caption is not None or lyrics is not None:
            raise ValueError("give either prompt_ids or caption and lyrics, not both")
        ids = np.asarray(prompt_ids)
        if (
            ids.dtype.kind not in "iu"
            or ids.ndim not in (1, 2)
            or (ids.ndim == 2 and ids.shape[0] != 2)
        ):
            raise ValueError(
                f"prompt_ids must be integer ids [P] or two rows [2, P], got shape {ids.shape}"
            )
        if not _MUSIC_MIN_PROMPT <= ids.shape[-1] <= _MUSIC_MAX_PROMPT:
            raise ValueError(
                f"a prompt row has {ids.shape[-1]} ids: must be within "
                f"{_MUSIC_MIN_PROMPT}..={_MUSIC_MAX_PROMPT}"
            )
        if int(ids.min()) < 0 or int(ids.max()) > _U32_MASK:
            raise ValueError("prompt ids must be within 0..2^32")
        req["prompt_ids"] = ids.tolist()
    elif caption is not None and lyrics is not None:
        for name, text in (("caption", caption), ("lyrics", lyrics)):
            if not isinstance(text, str) or not text:
                raise ValueError(f"{name} must be a non-empty string")
        req["caption"] = caption
        req["lyrics"] = lyrics
    else:
        raise ValueError("give prompt_ids, or both caption and lyrics")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float, np.number)):
        raise ValueError(f"seconds must be a number, got {seconds!r}")
    if not _MUSIC_MIN_SECONDS <= float(seconds) <= _MUSIC_MAX_SECONDS:
        raise ValueError(f"seconds is {seconds}: must be within 1..=360")
    req["seconds"] = seconds if isinstance(seconds, int) else float(seconds)
    if max_frames is not None:
        if isinstance(max_frames, bool) or int(max_frames) != max_frames or max_frames < 1:
            raise ValueError(f"max_frames must be a positive integer, got {max_frames!r}")
        req["max_frames"] = int(max_frames)
    if seed is not None:
        if isinstance(seed, bool) or int(seed) != seed or not 0 <= seed <= _U64_MAX:
            raise ValueError(f"seed must be an integer within 0..2^64, got {seed!r}")
        req["seed"] = int(seed)
    if sampling is not None:
        if sampling not in _MUSIC_SAMPLING:
            raise ValueError(f"sampling must be one of {_MUSIC_SAMPLING}, got {sampling!r}")
        req["sampling"] = sampling
    if allow_end is not None:
        req["allow_end"] = bool(allow_end)
    if hiddens is not None:
        req["hiddens"] = bool(hiddens)
    return req


class MusicStream(_Connection):
    """One song on ``/v1/music``. Made by :func:`music`.

    Iterate it (or call :meth:`recv`) for :class:`MusicFrame` s in order; the iteration stops
    after the song's ``end`` (see :attr:`end_reason`).
    """

    def __init__(self, ws: Any, started: Mapping[str, Any]) -> None:
        self._ws = ws
        self.started: Dict[str, Any] = dict(started)
        """The server's ``started`` message."""
        self.song: int = int(started["song"])
        """The server's id of this song."""
        self.max_frames: int = int(started["max_frames"])
        """Frames the song has at most."""
        self.prompt_tokens: int = int(started["prompt_tokens"])
        """Tokens of the conditional prompt row."""
        self.levels: int = int(started["levels"])
        """Codes per frame (8)."""
        self.hidden_size: int = int(started["hidden_size"])
        """The LM's hidden size."""
        self.hiddens: bool = bool(started["hiddens"])
        """Whether each frame carries its hiddens."""
        self.end_reason: Optional[str] = None
        """``"end"``, ``"max_frames"`` or ``"cancelled"`` once the song has ended."""
        self.frames_received = 0
        """Frames received so far."""
        self._waiting: Optional[MusicFrame] = None
        self._done = False
        self._terminal: Optional[ChorusError] = None
        self._lock = asyncio.Lock()

    @classmethod
    async def _open(
        cls, url: str, start: Mapping[str, Any], open_timeout: Optional[float]
    ) -> MusicStream:
        # Admission includes the prompt's prefill, which has no fixed bound: no reply timeout.
        ws, msg = await _handshake(url, start, "started", open_timeout, None)
        return cls(ws, msg)

    @property
    def closed(self) -> bool:
        """Whether the song has ended and every frame was read."""
        return self._done

    async def recv(self, timeout: Optional[float] = None) -> MusicFrame:
        """The next frame. Raises :class:`StreamClosed` after the song's last frame, the song's
        :class:`ChorusError` if the server ended it, :class:`asyncio.TimeoutError` after
        ``timeout`` seconds."""
        return await _recv_or_timeout(self._recv(), timeout)

    async def _recv(self) -> MusicFrame:
        async with self._lock:
            while True:
                if self._done:
                    assert self._terminal is not None
                    raise self._terminal
                try:
                    raw = await self._ws.recv()
                except ConnectionClosed as exc:
                    self._on_connection_closed(exc)
                    continue
                frame = await self._handle(raw)
                if frame is not None:
                    return frame

    async def _handle(self, raw: Union[str, bytes]) -> Optional[MusicFrame]:
        """One message: a whole frame, or ``None`` (a frame still waiting for its hiddens)."""
        if self._waiting is not None:
            expected = self.levels * self.hidden_size * 2
            if isinstance(raw, str) or len(raw) != expected:
                raise self._fail(_protocol_error(f"expected {expected} bytes of hiddens"))
            bits = np.frombuffer(bytes(raw), dtype="<u2")
            frame = dataclasses.replace(
                self._waiting, hiddens=_bf16_to_f32(bits).reshape(self.levels, self.hidden_size)
            )
            self._waiting = None
            self.frames_received += 1
            return frame
        if not isinstance(raw, str):
            raise self._fail(_protocol_error("binary message without its `frame`"))
        try:
            msg = _parse_json(raw)
        except ChorusError as bad:
            raise self._fail(bad) from None
        kind = msg.get("type")
        if kind == "frame":
            index = int(msg["index"])
            codes = np.asarray(msg["codes"], dtype=np.int32)
            if index != self.frames_received or codes.shape != (self.levels,):
                raise self._fail(_protocol_error(f"unexpected frame {raw!r:.200}"))
            frame = MusicFrame(index=index, codes=codes)
            if self.hiddens:
                # Kept across calls, so that a recv() cancelled here loses nothing.
                self._waiting = frame
                return None
            self.frames_received += 1
            return frame
        if kind == "end":
            self.end_reason = str(msg.get("reason"))
            return None
        if kind == "error":
            # State first: the close handshake below may be cancelled by a timeout.
            self._done = True
            self._terminal = _server_error(msg)
            await _close_after_error(self._ws, self._terminal)
            raise self._terminal
        raise self._fail(_protocol_error(f"unexpected message {raw!r:.200}"))

    def _on_connection_closed(self, exc: ConnectionClosed) -> None:
        self._done = True
        if self._terminal is not None:
            return
        if self.end_reason is not None:
            self._terminal = StreamClosed(
                "closed",
                f"the song has ended ({self.end_reason})",
                close_code=exc.rcvd.code if exc.rcvd is not None else None,
            )
        else:
            self._terminal = _closed_error(exc)

    def __aiter__(self) -> AsyncIterator[MusicFrame]:
        return self

    async def __anext__(self) -> MusicFrame:
        try:
            return await self.recv()
        except StreamClosed:
            raise StopAsyncIteration from None

    async def collect(self) -> MusicResult:
        """Reads every remaining frame until the song ends; the frames read by this call."""
        frames = [frame async for frame in self]
        codes = np.array([f.codes for f in frames], dtype=np.int32).reshape(-1, self.levels)
        hiddens = None
        if self.hiddens:
            hiddens = np.array([f.hiddens for f in frames], dtype=np.float32).reshape(
                -1, self.levels, self.hidden_size
            )
        return MusicResult(
            codes=codes,
            hiddens=hiddens,
            song=self.song,
            prompt_tokens=self.prompt_tokens,
            reason=self.end_reason or "",
        )

    async def cancel(self) -> None:
        """Asks the server to end the song at its next step.

        Frames already generated still arrive; the iteration then stops with
        :attr:`end_reason` ``"cancelled"`` (or the song's own reason if it ended first).
        """
        if self._done or self.end_reason is not None:
            return
        # A song already over is reported by the reader.
        with contextlib.suppress(ConnectionClosed):
            await self._ws.send(json.dumps({"type": "cancel"}))

    async def abort(self) -> None:
        """Closes the connection at once, which also cancels the song on the server."""
        if not self._done:
            self._done = True
            self._terminal = StreamClosed("closed", "the song was aborted")
            await _ws_close(self._ws)

    def _fail(self, err: ChorusError) -> ChorusError:
        self._done = True
        self._terminal = err
        transport = getattr(self._ws, "transport", None)
        if transport is not None:
            transport.abort()
        return err


class MusicOpening(Opening[MusicStream]):
    """:class:`Opening` that can also be iterated: ``async for frame in music(...)``.

    The connection ends with the song, or when the iterator is closed (``aclose()``, or its
    garbage collection after a ``break``); ``async with`` ends it deterministically.
    """

    def __aiter__(self) -> AsyncIterator[MusicFrame]:
        return self._frames()

    async def _frames(self) -> AsyncIterator[MusicFrame]:
        song = await self._open_fn()
        try:
            async for frame in song:
                yield frame
        finally:
            await song.abort()


def music(
    url: str,
    *,
    seconds: float,
    prompt_ids: Optional[npt.ArrayLike] = None,
    caption: Optional[str] = None,
    lyrics: Optional[str] = None,
    max_frames: Optional[int] = None,
    seed: Optional[int] = None,
    sampling: Optional[str] = None,
    allow_end: Optional[bool] = None,
    hiddens: bool = False,
    open_timeout: Optional[float] = 10.0,
) -> MusicOpening:
    """Generates one song over the WebSocket ``/v1/music``.

    The prompt is ``prompt_ids`` (``[P]`` ids, or ``[2, P]``: conditional and CFG rows) or both
    ``caption`` and ``lyrics`` (the server needs a tokenizer). ``seconds`` (1..360) sets the
    length, 25 frames per second, capped by ``max_frames``; ``seed`` (default 0), ``sampling``
    (``"seeded"``, ``"greedy"`` or ``"noise"``) and ``allow_end`` (default true: the song may end
    early) are passed as given; ``hiddens=True`` adds each frame's hiddens.

    Use as ``async for frame in music(...)``, ``async with music(...) as song:`` (for
    :meth:`MusicStream.cancel` and the song's details) or ``song = await music(...)``. Raises
    :class:`ValueError` for a request this client can tell is invalid, :class:`BusyError` when
    every song slot is taken and :class:`ChorusError` for other refusals.
    """
    start: Dict[str, Any] = {"type": "start"}
    start.update(
        _start_request(
            prompt_ids=prompt_ids,
            caption=caption,
            lyrics=lyrics,
            seconds=seconds,
            max_frames=max_frames,
            seed=seed,
            sampling=sampling,
            allow_end=allow_end,
            hiddens=hiddens,
        )
    )
    endpoint = _endpoint_url(url, "/v1/music", websocket=True)
    return MusicOpening(lambda: MusicStream._open(endpoint, start, open_timeout))


# --------------------------------------------------------------------------------------------
# HTTP


@dataclasses.dataclass(frozen=True)
class _Response:
    status: int
    headers: Dict[str, str]
    body: bytes


def _parse_json(text: Union[str, bytes]) -> Dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise _protocol_error(f"expected a JSON object, got {text!r:.200}") from None
    if not isinstance(value, dict):
        raise _protocol_error(f"expected a JSON object, got {text!r:.200}")
    return value


def _http_error(status: int, body: bytes) -> ChorusError:
    """The exception for an HTTP error answer (a JSON ``{"code", "message"}`` body if any)."""
    try:
        value = json.loads(body)
        code, message = str(value["code"]), str(value["message"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        text = body[:200].decode("utf-8", "replace").strip()
        return ChorusError("http", f"HTTP {status}: {text}", status=status)
    return _error(code, message, status=status)


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        chunks: List[bytes] = []
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read()


async def _http_exchange(
    method: str, url: str, body: Optional[bytes], content_type: Optional[str]
) -> _Response:
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or "localhost"
    port = parts.port or (443 if secure else 80)
    reader, writer = await asyncio.open_connection(host, port, ssl=True if secure else None)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"{method} {target} HTTP/1.1",
            f"Host: {parts.netloc.rpartition('@')[2]}",
            "Connection: close",
            "Accept-Encoding: identity",
        ]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
            lines.append(f"Content-Type: {content_type or 'application/octet-stream'}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))
        await writer.drain()
        while True:
            status_line = (await reader.readline()).decode("latin-1")
            fields = status_line.split(" ", 2)
            if len(fields) < 2 or not fields[0].startswith("HTTP/"):
                raise _protocol_error(f"bad HTTP status line {status_line!r:.200}")
            status = int(fields[1])
            headers: Dict[str, str] = {}
            while True:
                line = (await reader.readline()).decode("latin-1")
                if line in ("\r\n", "\n", ""):
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            # 1xx answers (e.g. 100 Continue) precede the real one.
            if status >= 200:
                break
        return _Response(status, headers, await _read_body(reader, headers))
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _http(
    method: str,
    url: str,
    *,
    body: Optional[bytes] = None,
    content_type: Optional[str] = None,
    timeout: Optional[float] = None,
) -> _Response:
    """One HTTP/1.1 request over asyncio streams (no proxy: the server is reached directly)."""
    return await _recv_or_timeout(_http_exchange(method, url, body, content_type), timeout)


async def decode_http(
    base_url: str,
    codes: npt.ArrayLike,
    *,
    pcm: str = "f32",
    timeout: Optional[float] = None,
) -> npt.NDArray[np.float32]:
    """Decodes a whole codes array with ``POST /v1/decode``: float32 ``[T * 1920]``.

    ``codes`` is an integer array ``[n_q, T]`` (or ``[1, n_q, T]``), decoded as one stream from
    the zero state. ``pcm="f32"`` (default) returns exactly the decoder's output, ``"s16"`` the
    16-bit WAV answer scaled by ``1 / 32767``. Raises :class:`ValueError` for a wrong dtype,
    shape or a negative code, :class:`ChorusError` (with ``.status``) for the server's refusals.
    """
    arr = np.asarray(codes)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"codes must be integers, got dtype {arr.dtype}")
    if arr.ndim == 3 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 2 or arr.size == 0:
        raise ValueError(f"codes must be [n_q, T] (or [1, n_q, T]), got shape {np.shape(codes)}")
    if int(arr.min()) < 0:
        raise ValueError(f"code {int(arr.min())} is negative")
    if pcm not in _PCM_FORMATS:
        raise ValueError(f"pcm must be one of {_PCM_FORMATS}, got {pcm!r}")
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(arr), allow_pickle=False)
    query = {"format": "f32" if pcm == "f32" else "wav"}
    url = _endpoint_url(base_url, "/v1/decode", websocket=False, query=query)
    resp = await _http("POST", url, body=buf.getvalue(), timeout=timeout)
    if resp.status != 200:
        raise _http_error(resp.status, resp.body)
    if pcm == "f32":
        return np.frombuffer(resp.body, dtype="<f4").astype(np.float32)
    with wave.open(io.BytesIO(resp.body), "rb") as wav:
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2")
    pcm_s16: npt.NDArray[np.float32] = samples.astype(np.float32) / np.float32(_S16_SCALE)
    return pcm_s16


def _read_safetensors(data: bytes) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """The tensors (I32 and BF16 widened to float32) and metadata of a safetensors file."""
    if len(data) < 8:
        raise _protocol_error("truncated safetensors file")
    (header_len,) = struct.unpack_from("<Q", data)
    header = _parse_json(data[8 : 8 + header_len])
    base = 8 + header_len
    dtypes: Dict[str, np.dtype[Any]] = {"I32": np.dtype("<i4"), "BF16": np.dtype("<u2")}
    tensors: Dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = dtypes.get(info.get("dtype"))
        if dtype is None:
            raise _protocol_error(f"tensor {name} has unexpected dtype {info.get('dtype')}")
        start, end = info["data_offsets"]
        raw = np.frombuffer(
            data, dtype=dtype, count=(end - start) // dtype.itemsize, offset=base + start
        )
        values = _bf16_to_f32(raw) if info["dtype"] == "BF16" else raw.astype(np.int32)
        tensors[name] = values.reshape(info["shape"])
    return tensors, dict(header.get("__metadata__", {}))


async def music_http(
    base_url: str,
    *,
    seconds: float,
    prompt_ids: Optional[npt.ArrayLike] = None,
    caption: Optional[str] = None,
    lyrics: Optional[str] = None,
    max_frames: Optional[int] = None,
    seed: Optional[int] = None,
    sampling: Optional[str] = None,
    allow_end: Optional[bool] = None,
    hiddens: bool = False,
    timeout: Optional[float] = None,
) -> MusicResult:
    """Generates one whole song with ``POST /v1/music``; the answer comes when it is done.

    Takes the same request as :func:`music`. Raises :class:`ValueError` for a request this
    client can tell is invalid and :class:`ChorusError` (with ``.status``) for the server's
    refusals (``BusyError`` for ``busy``).
    """
    req = _start_request(
        prompt_ids=prompt_ids,
        caption=caption,
        lyrics=lyrics,
        seconds=seconds,
        max_frames=max_frames,
        seed=seed,
        sampling=sampling,
        allow_end=allow_end,
        hiddens=hiddens,
    )
    url = _endpoint_url(base_url, "/v1/music", websocket=False, query={"format": "safetensors"})
    body = json.dumps(req).encode()
    resp = await _http("POST", url, body=body, content_type="application/json", timeout=timeout)
    if resp.status != 200:
        raise _http_error(resp.status, resp.body)
    tensors, meta = _read_safetensors(resp.body)
    codes = tensors["codes"].astype(np.int32).reshape(-1, MUSIC_LEVELS)
    hidden = tensors.get("frame_hiddens")
    return MusicResult(
        codes=codes,
        hiddens=None if hidden is None else hidden.reshape(codes.shape[0], MUSIC_LEVELS, -1),
        song=int(resp.headers.get("x-chorus-song", "0")),
        prompt_tokens=int(resp.headers.get("x-chorus-prompt-tokens", meta.get("prompt_tokens", 0))),
        reason=resp.headers.get("x-chorus-end-reason", meta.get("end_reason", "")),
        metadata=meta,
    )


async def health(
    base_url: str, *, timeout: Optional[float] = _DEFAULT_HTTP_TIMEOUT_S
) -> Dict[str, Any]:
    """``GET /healthz``: ``{"status", "protocol_version", "decoder", "max_streams",
    "live_streams", "free_slots"}``.

    A draining server answers too (``status`` is ``"draining"``); any other failure raises
    :class:`ChorusError` (or :class:`OSError` when the server cannot be reached).
    """
    url = _endpoint_url(base_url, "/healthz", websocket=False)
    resp = await _http("GET", url, timeout=timeout)
    if resp.status not in (200, 503):
        raise _http_error(resp.status, resp.body)
    try:
        return _parse_json(resp.body)
    except ChorusError:
        raise _http_error(resp.status, resp.body) from None


async def metrics(base_url: str, *, timeout: Optional[float] = _DEFAULT_HTTP_TIMEOUT_S) -> str:
    """``GET /metrics``: the Prometheus text."""
    url = _endpoint_url(base_url, "/metrics", websocket=False)
    resp = await _http("GET", url, timeout=timeout)
    if resp.status != 200:
        raise _http_error(resp.status, resp.body)
    return resp.body.decode("utf-8")


async def wait_ready(
    base_url: str, *, timeout: float = 30.0, interval: float = 0.05
) -> Dict[str, Any]:
    """Polls ``/healthz`` until the server answers ``ok``; returns its answer.

    Raises :class:`asyncio.TimeoutError` when it is not ready within ``timeout`` seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        try:
            status = await health(base_url, timeout=max(0.1, deadline - loop.time()))
            if status.get("status") == "ok":
                return status
        except (OSError, ChorusError, asyncio.TimeoutError):
            pass
        if loop.time() >= deadline:
            raise asyncio.TimeoutError(f"{base_url} was not ready within {timeout} s")
        await asyncio.sleep(interval)
