"""Mimi decoding: whole sequences, streams, many streams per step, and transformers' weights."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional

import numpy as np

from . import _arrays
from ._chorus import Decoder

#: Checkpoint prefixes of the encoder side, which decoding never reads.
_ENCODER_PREFIXES = ("encoder.", "encoder_transformer.", "downsample.")


class _MimiFacts:
    """What the decoder and the encoder tell of their model and device (read from ``_core``)."""

    _core: Any

    @property
    def max_streams(self) -> int:
        """Slots held at once: open streams, and signals run side by side by one call."""
        return self._core.max_streams

    @property
    def num_quantizers(self) -> int:
        """Codebooks of the model: ``n_q`` may be 1 up to this."""
        return self._core.num_quantizers

    @property
    def codebook_size(self) -> int:
        """Codes must lie in ``[0, codebook_size)``."""
        return self._core.codebook_size

    @property
    def latent_dim(self) -> int:
        """Length of one latent frame."""
        return self._core.latent_dim

    @property
    def sample_rate(self) -> int:
        """24000."""
        return self._core.sample_rate

    @property
    def frame_samples(self) -> int:
        """1920 samples (80 ms) per frame."""
        return self._core.frame_samples

    @property
    def device(self) -> str:
        """The backend and precision in words, e.g. ``cuda (NVIDIA H200), bf16``."""
        return self._core.device

    @property
    def open_streams(self) -> int:
        """Streams open now."""
        return self._core.open_streams


class MimiDecoder(_MimiFacts):
    """Decodes Mimi codes (or latents) to 24 kHz float32 PCM, 1920 samples per 80 ms frame.

    One decoder holds ``max_streams`` independent streaming states (slots) on ``device``
    (``"auto"``, ``"cpu"`` or ``"cuda"``); ``precision`` is ``"f32"`` or ``"bf16"`` (CUDA's
    default). ``model`` is ``"kyutai/mimi"`` (fetched into the Hugging Face cache), a local
    ``.safetensors`` file or folder in either checkpoint layout, or ``"random"`` (seeded random
    weights: the output is noise). Decoding releases the GIL; bad input raises ``ValueError``.
    """

    def __init__(
        self,
        model: str = "kyutai/mimi",
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 64,
        threads: Optional[int] = None,
    ) -> None:
        _check_streams(max_streams)
        self._init(Decoder(model, device, precision, max_streams, threads))

    def _init(self, core: Decoder) -> None:
        self._live: Optional[Decoder] = core

    @property
    def _core(self) -> Decoder:
        if self._live is None:
            raise ValueError("the decoder is closed")
        return self._live

    @classmethod
    def _wrap(cls, core: Decoder) -> "MimiDecoder":
        dec = cls.__new__(cls)
        dec._init(core)
        return dec

    # Facts about the model and device.
    def __repr__(self) -> str:
        return (
            f"MimiDecoder(source={self._core.source!r}, device={self.device!r}, "
            f"max_streams={self.max_streams})"
        )

    def decode(self, codes: Any) -> Any:
        """Decodes whole sequences: codes ``[n_q, T]`` or ``[B, n_q, T]`` to float32 ``[B, T*1920]``.

        Runs 16 frames of each sequence per step (far faster than frame by frame) and equals
        decoding frame by frame from a fresh stream to f32 rounding. It uses the slots no stream
        holds, so it can run beside open streams. numpy in, numpy out; torch in, torch out (on the
        input's device).
        """
        arr, restore = _arrays.as_codes(codes)
        return restore(self._core.decode(arr))

    def stream(self, n_q: int = 8) -> "MimiStream":
        """Opens a stream taking ``n_q`` codebooks per frame (or latents), in the zero state."""
        if not 1 <= n_q <= self.num_quantizers:
            raise ValueError(f"n_q = {n_q}: the model takes 1..={self.num_quantizers} codebooks")
        slot, generation = self._core.open_slot()
        return MimiStream(self, slot, generation, n_q)

    def step(self, frames: Mapping["MimiStream", Any]) -> Dict["MimiStream", Any]:
        """Decodes one frame for each stream in ``frames`` in one batched step.

        Each value is one frame of codes ``[n_q]`` or of latents ``[latent_dim]`` (a float
        array); the result maps each stream to its 1920 samples.
        """
        items = []
        restores = []
        for s, value in frames.items():
            s._check(self)
            arr, restore = s._frame_input(value)
            if arr.ndim != 1:
                raise ValueError(
                    f"stream {s.slot}: step takes one frame per stream, found shape {arr.shape}"
                )
            items.append((s.slot, s._generation, arr))
            restores.append(restore)
        if not items:
            return {}
        pcm = self._core.step(items)
        return {s: r(pcm[i]) for i, (s, r) in enumerate(zip(frames, restores))}

    def close(self) -> None:
        """Releases the decoder's device memory now; every later call (and every stream) raises."""
        self._live = None

    def __enter__(self) -> "MimiDecoder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class MimiStream:
    """One stream's decoding state on a :class:`MimiDecoder` (a slot).

    Frames must come in order; ``decode`` of ``[n_q, k]`` codes gives ``k * 1920`` samples that
    continue the stream. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, decoder: MimiDecoder, slot: int, generation: int, n_q: int) -> None:
        self._decoder = decoder
        self.slot = slot
        self._generation = generation
        self.n_q = n_q
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._closed

    def _check(self, decoder: Optional[MimiDecoder] = None) -> None:
        if self._closed:
            raise ValueError(f"stream {self.slot} is closed")
        if self._decoder._live is None:
            raise ValueError("the decoder is closed")
        if decoder is not None and decoder is not self._decoder:
            raise ValueError(f"stream {self.slot} belongs to another decoder")

    def _frame_input(self, value: Any, latent: Optional[bool] = None) -> Any:
        """Codes ``[n_q(, k)]`` as int64, or latents ``[latent_dim(, k)]`` as float32.

        ``latent=None`` tells them apart by dtype: floats are latents.
        """
        if latent is None:
            raw, _ = _arrays.to_numpy(value, "frame")
            latent = bool(np.issubdtype(raw.dtype, np.floating))
        if latent:
            arr, restore = _arrays.as_latents(value)
            if arr.shape[:1] != (self._decoder.latent_dim,):
                raise ValueError(
                    f"stream {self.slot}: latents have shape {arr.shape}, expected "
                    f"[{self._decoder.latent_dim}] or [{self._decoder.latent_dim}, k]"
                )
            return arr, restore
        arr, restore = _arrays.as_codes(value)
        if arr.shape[:1] != (self.n_q,):
            raise ValueError(
                f"stream {self.slot}: codes have shape {arr.shape}, expected [{self.n_q}] "
                f"or [{self.n_q}, k] (the stream was opened with n_q = {self.n_q})"
            )
        return arr, restore

    def decode(self, codes: Any = None, *, latent: Any = None) -> Any:
        """Decodes the next frame(s): codes ``[n_q]``/``[n_q, k]`` or ``latent=[dim]``/``[dim, k]``.

        Returns float32 PCM of ``k * 1920`` samples (numpy or torch, like the input). The whole
        block is checked before any frame is decoded, so a refused block leaves the stream as it
        was, and it runs as one call (the device's whole-file chunk per step where it can: 32 frames
        on the CPU, 48 on CUDA).
        """
        self._check()
        if (codes is None) == (latent is None):
            raise ValueError("give codes or latent=, not both")
        if latent is None:
            arr, restore = self._frame_input(codes, latent=False)
        else:
            arr, restore = self._frame_input(latent, latent=True)
        if arr.ndim not in (1, 2):
            raise ValueError(f"stream {self.slot}: expected rank 1 or 2, found shape {arr.shape}")
        return restore(self._decoder._core.stream_decode(self.slot, self._generation, arr))

    def reset(self) -> None:
        """Returns the stream to the zero state, as if newly opened."""
        self._check()
        self._decoder._core.reset(self.slot, self._generation)

    def close(self) -> None:
        """Frees the slot for another stream; closing twice is harmless."""
        if not self._closed:
            self._closed = True
            live = self._decoder._live
            if live is not None:
                live.close_slot(self.slot, self._generation)

    def __enter__(self) -> "MimiStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn the decoder down
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"MimiStream(slot={self.slot}, n_q={self.n_q}, {state})"


def from_transformers(
    model: Any,
    device: str = "auto",
    precision: Optional[str] = None,
    max_streams: int = 64,
    threads: Optional[int] = None,
) -> MimiDecoder:
    """A :class:`MimiDecoder` with the weights of an in-memory transformers ``MimiModel``.

    No file is written. ``dec.decode(codes)`` then replaces ``model.decode(codes).audio_values[:, 0]``.
    """
    _check_streams(max_streams)
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "state_dict"):
        raise ValueError("from_transformers takes a transformers MimiModel")
    tensors = {}
    for name, t in model.state_dict().items():
        if name.startswith(_ENCODER_PREFIXES) or not t.is_floating_point():
            continue
        tensors[name] = np.ascontiguousarray(t.detach().to("cpu").float().numpy())
    config_json = config.to_json_string(use_diff=False) if hasattr(config, "to_json_string") else json.dumps(config)
    source = f"transformers {type(model).__name__} (in memory)"
    core = Decoder.from_tensors(
        config_json, tensors, source, device, precision, max_streams, threads
    )
    return MimiDecoder._wrap(core)


def _check_streams(max_streams: int) -> None:
    if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
        raise ValueError(f"max_streams = {max_streams!r}: need a positive integer")
