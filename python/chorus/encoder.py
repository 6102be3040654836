"""Mimi encoding: 24 kHz audio to codes (and latents), many signals side by side."""

from __future__ import annotations

import os
from typing import Any, Iterable, List, Optional, Tuple, Union

import numpy as np

from . import _arrays
from ._chorus import Encoder
from .mimi import _check_streams, _MimiFacts


class MimiEncoder(_MimiFacts):
    """Encodes 24 kHz mono float audio into Mimi codes, 1920 samples (80 ms) per frame.

    ``model`` is ``"kyutai/mimi"`` (fetched into the Hugging Face cache), a local checkpoint in
    either layout (it must hold the encoder side), or ``"random"`` (seeded random weights).
    ``device`` is ``"auto"``, ``"cpu"`` or ``"cuda"``; ``precision`` ``"f32"`` or ``"bf16"``
    (CUDA's default: codes may then differ from f32 at the finer levels, where the quantiser's
    choices are near-ties). Signals of a batch are encoded side by side, up to ``max_streams`` at
    a time. Encoding releases the GIL; bad input raises ``ValueError``.
    """

    def __init__(
        self,
        model: str = "kyutai/mimi",
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 16,
        threads: Optional[int] = None,
    ) -> None:
        _check_streams(max_streams)
        self._core: Encoder = Encoder(model, device, precision, max_streams, threads)

    def stream(self, n_q: int = 8) -> "MimiEncoderStream":
        """Opens a stream quantising to ``n_q`` codebooks, in the zero state (it holds a slot)."""
        if not isinstance(n_q, int) or not 1 <= n_q <= self.num_quantizers:
            raise ValueError(f"n_q = {n_q!r}: the model takes 1..={self.num_quantizers} codebooks")
        slot, generation = self._core.open_slot()
        return MimiEncoderStream(self, slot, generation, n_q)

    def __repr__(self) -> str:
        return (
            f"MimiEncoder(source={self._core.source!r}, device={self.device!r}, "
            f"max_streams={self.max_streams})"
        )

    def encode(
        self, audio: Any, n_q: int = 8, latents: bool = False
    ) -> Union[Any, Tuple[Any, Any]]:
        """Encodes audio ``[T]`` or ``[B, T]`` (24 kHz mono, float) into codes ``[n_q, F]`` or
        ``[B, n_q, F]`` (int64), F = ceil(T / 1920); the last partial frame is padded with silence.

        Each signal is encoded from a fresh stream, as ``chorus encode`` does; the codes are what
        ``MimiDecoder.decode`` takes. With ``latents=True`` it returns ``(codes, latents)``, the
        latents being the pre-quantisation vectors ``[F, latent_dim]`` or ``[B, F, latent_dim]``.
        numpy in, numpy out; torch in, torch out (on the input's device).
        """
        arr, restore = _arrays.as_latents(audio, "audio")
        if arr.ndim not in (1, 2):
            raise ValueError(f"audio: expected [T] or [B, T] samples, found shape {arr.shape}")
        batched = arr.ndim == 2
        if not isinstance(n_q, (int, np.integer)) or isinstance(n_q, bool):
            raise ValueError(f"n_q must be an integer, not {n_q!r}")
        codes, lat = self._core.encode(arr if batched else arr[None, :], int(n_q), bool(latents))
        if not batched:
            codes = codes[0]
            lat = None if lat is None else lat[0]
        if latents:
            return restore(codes), restore(lat)
        return restore(codes)

    def encode_files(
        self,
        paths: Iterable[Union[str, "os.PathLike[str]"]],
        n_q: int = 8,
        allow_truncated: bool = False,
        readers: Optional[int] = None,
        skip_errors: bool = False,
    ) -> List[Optional[np.ndarray]]:
        """Encodes audio files into codes, one int64 array ``[n_q, F]`` per path, in order.

        Files are read as ``chorus encode`` reads them (WAV, FLAC, MP3, Ogg Vorbis or Opus; any
        rate, resampled to 24 kHz; channels mixed to mono; the last partial frame padded with
        silence) on ``readers`` threads (default: one beside the CPU, every core but one beside a
        GPU) while the encoder works, and encoded side by side, one slot each, up to
        ``max_streams`` at a time: the path of ``chorus encode --audio-dir``. Each file's codes
        equal ``encode`` of its audio alone. A cut-short file is refused unless
        ``allow_truncated``. A file that cannot be read does not stop the others: once they are
        encoded, a ``ValueError`` names every such file, or with ``skip_errors=True`` its entry is
        ``None``. Ctrl-C stops the call.
        """
        names = [os.fspath(p) for p in paths]
        if not isinstance(n_q, (int, np.integer)) or isinstance(n_q, bool):
            raise ValueError(f"n_q must be an integer, not {n_q!r}")
        if readers is not None and (not isinstance(readers, int) or readers < 1):
            raise ValueError(f"readers = {readers!r}: expected a positive integer or None")
        out = self._core.encode_files(names, int(n_q), bool(allow_truncated), readers)
        failed = [r for r in out if isinstance(r, str)]
        if failed and not skip_errors:
            listed = "\n  ".join(failed)
            raise ValueError(f"{len(failed)} of {len(names)} file(s) could not be encoded:\n  {listed}")
        return [None if isinstance(r, str) else r for r in out]


class MimiEncoderStream:
    """One stream's encoding state on a :class:`MimiEncoder` (a slot).

    ``encode`` takes audio in chunks of any length and returns the codes of every frame the chunk
    completes (``[n_q, k]``, k possibly 0); the samples past the last whole frame wait for the next
    chunk. ``flush`` encodes what waits, padded with silence. Encoding a signal in chunks and
    flushing gives the codes of ``MimiEncoder.encode`` on the whole signal. Use it as a context
    manager, or call :meth:`close`.
    """

    def __init__(self, encoder: MimiEncoder, slot: int, generation: int, n_q: int) -> None:
        self._encoder = encoder
        self.slot = slot
        self._generation = generation
        self.n_q = n_q
        self._pending = np.zeros(0, np.float32)
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed

    @property
    def pending_samples(self) -> int:
        """Samples received that do not complete a frame yet."""
        return int(self._pending.size)

    def _check(self) -> None:
        if self._closed:
            raise ValueError(f"encoder stream {self.slot} is closed")

    def _run(self, samples: np.ndarray, latents: bool, restore: Any) -> Any:
        codes, lat = self._encoder._core.stream_encode(
            self.slot, self._generation, samples, self.n_q, latents
        )
        if latents:
            return restore(codes), restore(lat)
        return restore(codes)

    def encode(self, audio: Any, latents: bool = False) -> Any:
        """Encodes the frames ``audio`` (``[T]``, 24 kHz, float) completes: codes ``[n_q, k]``
        (with ``latents=True``, also the latents ``[k, latent_dim]``). A refused chunk (not
        finite, wrong shape) leaves the stream as it was.
        """
        self._check()
        arr, restore = _arrays.as_latents(audio, "audio")
        if arr.ndim != 1:
            raise ValueError(f"audio: a stream takes [T] samples, found shape {arr.shape}")
        if not np.isfinite(arr).all():
            bad = int(np.flatnonzero(~np.isfinite(arr))[0])
            raise ValueError(f"audio sample {bad} is {arr[bad]} (audio must be finite)")
        joined = np.concatenate([self._pending, arr])
        whole = joined.size - joined.size % self._encoder.frame_samples
        out = self._run(np.ascontiguousarray(joined[:whole]), latents, restore)
        self._pending = joined[whole:].copy()
        return out

    def flush(self, latents: bool = False) -> Any:
        """Encodes the samples waiting (if any) as one frame padded with silence: codes ``[n_q, 0]``
        or ``[n_q, 1]``. The stream then continues from that frame's state."""
        self._check()
        frame = self._encoder.frame_samples
        padded = np.zeros(frame if self._pending.size else 0, np.float32)
        padded[: self._pending.size] = self._pending
        self._pending = np.zeros(0, np.float32)
        return self._run(padded, latents, lambda x: x)

    def reset(self) -> None:
        """Back to the zero state; samples waiting are dropped."""
        self._check()
        self._encoder._core.reset(self.slot, self._generation)
        self._pending = np.zeros(0, np.float32)

    def close(self) -> None:
        """Releases the slot; later calls raise ``ValueError``."""
        if not self._closed:
            self._closed = True
            self._encoder._core.close_slot(self.slot, self._generation)

    def __enter__(self) -> "MimiEncoderStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
