"""Sesame CSM text to speech: text (after optional context turns) to 24 kHz audio, many utterances
at once, each frame's audio decoded by Mimi inside the frame on the device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ._chorus import TtsStage

#: Mimi frames per second (one frame = 80 ms = 1,920 samples at 24 kHz).
FRAME_RATE = 12.5

#: A context turn: ``(speaker, text, codes)`` with ``codes`` int ``[T, codebooks]`` (Mimi codes of
#: what was said, e.g. from ``chorus.MimiEncoder``'s ``[n_q, T]`` codes transposed).
ContextTurn = Tuple[int, str, np.ndarray]


@dataclass
class Utterance:
    """One generated utterance: ``audio`` float32 ``[samples]`` at 24 kHz, ``codes`` int32
    ``[T, codebooks]``, and ``end``: ``"end"`` (the model drew its all-zero end frame, which is not
    kept), ``"max_frames"`` (the length cap) or ``"cancelled"``."""

    audio: np.ndarray
    codes: np.ndarray
    end: str

    @property
    def seconds(self) -> float:
        """Seconds of audio."""
        return self.codes.shape[0] / FRAME_RATE


def _context(turns: Sequence[ContextTurn]) -> List[Tuple[int, str, np.ndarray]]:
    return [(int(s), str(t), np.ascontiguousarray(c, dtype=np.int64)) for s, t, c in turns]


class Tts:
    """Sesame CSM-1B (``model``: ``sesame/csm-1b``, a folder, files, ``random``, ``random-small``)
    with ``mimi`` (default ``kyutai/mimi``; ``random`` for a random model) on ``device``, for up to
    ``max_utterances`` utterances at once. ``temperature`` and ``top_k`` are the defaults of every
    utterance (upstream's 0.9 and 50); each call may set its own (``temperature`` 0 is greedy,
    ``top_k`` 1 to 2051).
    """

    def __init__(
        self,
        model: str = "sesame/csm-1b",
        *,
        device: str = "auto",
        precision: Optional[str] = None,
        max_utterances: int = 8,
        max_context: Optional[int] = None,
        threads: Optional[int] = None,
        tokenizer: Optional[str] = None,
        mimi: Optional[str] = None,
        temperature: float = 0.9,
        top_k: int = 50,
    ) -> None:
        self._stage = TtsStage(
            model,
            device=device,
            precision=precision,
            max_utterances=max_utterances,
            max_context=max_context,
            threads=threads,
            tokenizer=tokenizer,
            mimi=mimi,
            temperature=temperature,
            top_k=top_k,
        )

    @property
    def device(self) -> str:
        """The device, in words."""
        return self._stage.device

    def _add(self, text, speaker, context, prompt_ids, max_seconds, seed, sampling, draws) -> int:
        ids = None if prompt_ids is None else np.ascontiguousarray(prompt_ids, dtype=np.int64)
        temperature, top_k = draws
        return self._stage.add(
            text=text,
            speaker=speaker,
            context=_context(context),
            prompt_ids=ids,
            max_seconds=max_seconds,
            seed=seed,
            sampling=sampling,
            temperature=temperature,
            top_k=top_k,
        )

    def stream(
        self,
        text: Optional[str] = None,
        *,
        speaker: int = 0,
        context: Sequence[ContextTurn] = (),
        prompt_ids: Optional[np.ndarray] = None,
        max_seconds: float = 10.0,
        seed: int = 0,
        sampling: str = "seeded",
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
    ) -> Iterator[np.ndarray]:
        """Yields the utterance's audio (float32, 24 kHz) frame by frame as it is generated.
        Leaving the loop early cancels the utterance."""
        draws = (temperature, top_k)
        uid = self._add(text, speaker, context, prompt_ids, max_seconds, seed, sampling, draws)
        done = False
        try:
            while not done:
                for i, _, end in self._stage.step():
                    if i == uid and end is not None:
                        done = True
                chunk = self._stage.take_new(uid)
                if chunk.size:
                    yield chunk
        finally:
            if not done:
                self._stage.cancel(uid)
            self._stage.take(uid)

    def generate(
        self,
        texts: Sequence[str],
        *,
        speakers: Optional[Sequence[int]] = None,
        context: Sequence[ContextTurn] = (),
        max_seconds: float = 10.0,
        seed: int = 0,
        sampling: str = "seeded",
        temperature: Optional[float] = None,
        top_k: Optional[int] = None,
    ) -> List[Utterance]:
        """Speaks every text of ``texts`` (together, up to ``max_utterances`` at a time) after the
        same ``context`` turns; utterance ``i`` draws with seed ``seed + i``."""
        draws = (temperature, top_k)
        speakers = list(speakers) if speakers is not None else [0] * len(texts)
        if len(speakers) != len(texts):
            raise ValueError(f"{len(speakers)} speakers for {len(texts)} texts")
        out: List[Optional[Utterance]] = [None] * len(texts)
        waiting = list(range(len(texts)))
        running = {}
        while waiting or running:
            while waiting and len(running) < self._stage.max_utterances:
                k = waiting.pop(0)
                uid = self._add(
                    texts[k], speakers[k], context, None, max_seconds, seed + k, sampling, draws
                )
                running[uid] = k
            for uid, _, end in self._stage.step():
                if end is not None and uid in running:
                    codes, audio, why = self._stage.take(uid)
                    out[running.pop(uid)] = Utterance(audio=audio, codes=codes, end=why)
        return [u for u in out if u is not None]

    def say(self, text: str, **kw) -> Utterance:
        """One utterance: ``generate([text], ...)[0]``."""
        speaker = kw.pop("speaker", 0)
        return self.generate([text], speakers=[speaker], **kw)[0]
