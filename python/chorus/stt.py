"""Kyutai streaming speech to text (``kyutai/stt-1b-en_fr``, ``kyutai/stt-2.6b-en``): 24 kHz audio
to words with start and end times, many streams at once, Mimi's encoder inside every step on the
device."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List, Optional, Union

import numpy as np

from ._chorus import FRAME_SAMPLES, SAMPLE_RATE, SttStage


@dataclass
class Word:
    """One word: its text, and its start and end in seconds from the start of the audio."""

    text: str
    start: float
    end: Optional[float]


def _pcm(audio: np.ndarray) -> np.ndarray:
    a = np.asarray(audio)
    if a.ndim != 1:
        raise ValueError(f"audio must be mono [samples], got shape {a.shape}")
    if np.issubdtype(a.dtype, np.integer):
        if a.dtype != np.int16:
            raise ValueError(f"integer audio must be int16, got {a.dtype}")
        return (a.astype(np.float32) / 32768.0).astype(np.float32)
    return np.ascontiguousarray(a, dtype=np.float32)


class Stt:
    """Kyutai STT (``model``: ``kyutai/stt-1b-en_fr``, ``kyutai/stt-2.6b-en``, a folder, files,
    ``random``, ``random-2.6b``, ``random-small``) with ``mimi`` (default ``kyutai/mimi``;
    ``random`` for a random model) on ``device``, for up to ``max_streams`` streams at once."""

    def __init__(
        self,
        model: str = "kyutai/stt-1b-en_fr",
        *,
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 8,
        max_seconds: float = 3600.0,
        threads: Optional[int] = None,
        tokenizer: Optional[str] = None,
        mimi: Optional[str] = None,
    ) -> None:
        self._stage = SttStage(
            model,
            device=device,
            precision=precision,
            max_streams=max_streams,
            max_seconds=max_seconds,
            threads=threads,
            tokenizer=tokenizer,
            mimi=mimi,
        )

    @property
    def stage(self) -> SttStage:
        """The stage underneath (streams, steps, takes)."""
        return self._stage

    @property
    def device(self) -> str:
        return self._stage.device

    def stream(self) -> "SttStream":
        """A live stream: ``feed`` it chunks of audio, get the words finished so far."""
        return SttStream(self)

    def transcribe(self, audio: Union[np.ndarray, str, os.PathLike]) -> List[Word]:
        """The words of ``audio``: a 24 kHz mono array (float in [-1, 1], or int16) or a file path
        (any format the CLI reads, resampled to 24 kHz), with the model's silence before it and
        its flush after it, as ``chorus transcribe`` does."""
        if isinstance(audio, (str, os.PathLike)):
            audio = SttStage.read_audio(os.fspath(audio))
        s = self.stream()
        words = s.feed(audio)
        return words + s.finish()


class SttStream:
    """One stream of an :class:`Stt`: ``feed`` audio chunks of any size and get back the words
    finished so far; ``finish`` flushes the model's delay and returns the rest. Times are seconds
    from the first sample fed."""

    def __init__(self, stt: Stt) -> None:
        self._stage = stt._stage
        self._id = self._stage.add()
        self._offset = self._stage.silence_prefix_seconds
        self._done = False
        self._vad: List[np.ndarray] = []
        prefix = int(round(self._offset * SAMPLE_RATE))
        if prefix:
            self._stage.push(self._id, np.zeros(prefix, dtype=np.float32))

    @property
    def vad(self) -> np.ndarray:
        """Class-0 probability of each VAD head per step so far, ``[steps, heads]`` (the 1B's
        pause horizons 0.5, 1, 2, 3 s; no columns for the 2.6B)."""
        heads = self._stage.vad_heads
        if not self._vad:
            return np.zeros((0, heads), dtype=np.float32)
        return np.concatenate(self._vad).reshape(-1, heads)

    def _take(self) -> List[Word]:
        words, vad, ended = self._stage.take(self._id)
        if vad.size:
            self._vad.append(vad)
        self._done = ended
        off = self._offset
        return [
            Word(t, max(s - off, 0.0), None if e is None else max(e - off, 0.0))
            for t, s, e in words
        ]

    def feed(self, audio: np.ndarray) -> List[Word]:
        """Queues ``audio`` (24 kHz mono), runs every full frame, returns the words finished."""
        if self._done:
            raise RuntimeError("the stream has finished")
        self._stage.push(self._id, _pcm(audio))
        while self._stage.step() > 0:
            pass
        return self._take()

    def finish(self) -> List[Word]:
        """Pushes the flush of silence, ends the stream, returns its remaining words."""
        if self._done:
            return []
        flush = np.zeros(self._stage.flush_frames * FRAME_SAMPLES, dtype=np.float32)
        self._stage.push(self._id, flush)
        self._stage.end(self._id)
        while self._stage.step() > 0:
            pass
        words = self._take()
        if not self._done:
            raise RuntimeError("the stream did not end after its last step")
        return words
