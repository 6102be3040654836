"""The semantic stage of MiniMax Music 3: prompt to codes and ``frame_hiddens``, many songs at once."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Union

import numpy as np

from . import _arrays
from ._chorus import MusicStage

#: Frames per second of the semantic stage (one frame = 40 ms).
FRAME_RATE = 25

Progress = Callable[[int, int, int], None]


@dataclass
class SemanticSong:
    """One generated song.

    ``codes`` is int32 ``[T, 8]`` (c0 and the 7 depth levels; the acoustic stage does not read
    them). ``frame_hiddens`` is ``[1, T, 8 * hidden]`` (``[1, T, 32768]`` for the real model),
    each frame's 8 hidden states in layer-major order: a torch bfloat16 tensor when torch is
    installed, what the acoustic stage consumes; otherwise numpy float32 holding the same bf16
    values. ``end`` is why it stopped: ``"end"`` (the model drew END), ``"max_frames"`` or
    ``"cancelled"`` (``"forced_done"`` only for teacher-forced songs, which ``generate`` does
    not make).
    """

    codes: np.ndarray
    frame_hiddens: Any
    end: str

    @property
    def frames(self) -> int:
        """Frames generated (25 per second)."""
        return int(self.codes.shape[0])

    @property
    def seconds(self) -> float:
        """Seconds of music."""
        return self.frames / FRAME_RATE


def _hiddens(bits: np.ndarray) -> Any:
    """bf16 bits ``[T, W]`` to ``[1, T, W]``: torch bf16 if torch is installed, else float32."""
    try:
        import torch
    except ImportError:
        return (bits.astype(np.uint32) << 16).view(np.float32)[None]
    t = torch.from_numpy(bits.view(np.int16))
    return t.view(torch.bfloat16).unsqueeze(0)


class MusicSemantic:
    """MiniMax Music 3's semantic stage: Qwen3 with classifier-free guidance and the RVQ depth
    decoder, generating up to ``max_songs`` songs together, each of up to ``max_context``
    positions (prompt + frames + 1; the default fits the longest song).

    ``model`` is a model folder (``lm/`` and ``depth/`` subfolders, upstream names), ``"LM,DEPTH"``
    safetensors files, a hub id ``owner/repo/subfolder``, or ``"random"`` / ``"random-small"``
    (random weights of the real or a tiny architecture: the music is noise). ``tokenizer`` is a
    ``tokenizer.json`` for captions and lyrics (found beside the weights if omitted).
    ``batch_invariant`` (CUDA) makes a song's codes independent of the songs sharing its steps,
    at a cost from two songs up (the CPU always is).
    """

    def __init__(
        self,
        model: str,
        device: str = "auto",
        precision: Optional[str] = None,
        max_songs: int = 4,
        max_context: Optional[int] = None,
        threads: Optional[int] = None,
        tokenizer: Optional[Union[str, "os.PathLike[str]"]] = None,
        batch_invariant: bool = False,
    ) -> None:
        if isinstance(max_songs, bool) or not isinstance(max_songs, int) or max_songs < 1:
            raise ValueError(f"max_songs = {max_songs!r}: need a positive integer")
        tok = None if tokenizer is None else os.fspath(tokenizer)
        self._core = MusicStage(
            model, device, precision, max_songs, max_context, threads, tok, bool(batch_invariant)
        )

    @property
    def device(self) -> str:
        """The backend and precision in words."""
        return self._core.device

    @property
    def hidden_size(self) -> int:
        """The LM's hidden size (4096 for the real model)."""
        return self._core.hidden_size

    @property
    def max_songs(self) -> int:
        """Songs generated together at most."""
        return self._core.max_songs

    def __repr__(self) -> str:
        return f"MusicSemantic(source={self._core.source!r}, device={self.device!r})"

    def encode_prompt(self, caption: str, lyrics: str) -> np.ndarray:
        """The prompt ids ``[2, P]`` (conditional row, CFG row) upstream builds from the text."""
        return self._core.encode_prompt(caption, lyrics)

    def generate(
        self,
        caption: Union[str, Sequence[str], None] = None,
        lyrics: Union[str, Sequence[str], None] = None,
        seconds: float = 30.0,
        seed: Union[int, Sequence[int]] = 0,
        *,
        prompt_ids: Any = None,
        sampling: str = "seeded",
        allow_end: bool = True,
        progress: Optional[Progress] = None,
    ) -> Union[SemanticSong, List[SemanticSong]]:
        """Generates one song, or several together when given lists.

        Give ``caption`` and ``lyrics`` (text; needs a tokenizer) or ``prompt_ids`` (``[P]`` or
        ``[2, P]`` integers; a nested list is one array). Lists of captions or lyrics, a list of
        prompt-id arrays, or a sequence of seeds make one song each (a single seed is shared);
        songs beyond ``max_songs`` start as others finish. ``sampling`` is ``"seeded"`` (counter-based noise from the seed), ``"greedy"`` or
        ``"noise"`` (the reference's noise). ``progress(song, frames_done, frames_total)`` is
        called after every frame. Ctrl-C cancels every song of the call and raises.
        """
        prompts, single = self._prompts(caption, lyrics, prompt_ids)
        seeds = [int(s) for s in np.ravel(seed)] if np.ndim(seed) else [int(seed)] * len(prompts)
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} songs")
        # Every song is checked before the first starts: a bad one cannot cancel the others.
        for p in prompts:
            self._core.check_song(p, seconds, sampling)
        results: List[Optional[SemanticSong]] = [None] * len(prompts)
        running = {}
        reported = {}
        pending = list(range(len(prompts)))
        try:
            while pending or running:
                while pending and len(running) < self.max_songs:
                    i = pending.pop(0)
                    sid = self._core.add_song(prompts[i], seconds, int(seeds[i]), sampling, allow_end)
                    running[sid] = i
                for sid, done, total, end in self._core.step():
                    if sid not in running:
                        continue
                    # Frames arrive a step late: report each new count once.
                    if progress is not None and done != reported.get(sid, 0):
                        reported[sid] = done
                        progress(running[sid], done, total)
                    if end is not None:
                        codes, bits, why = self._core.take(sid)
                        results[running.pop(sid)] = SemanticSong(codes, _hiddens(bits), why)
        except BaseException:
            for sid in running:
                self._core.cancel(sid)
                self._core.take(sid)
            raise
        songs = [r for r in results if r is not None]
        return songs[0] if single else songs

    def _prompts(self, caption: Any, lyrics: Any, prompt_ids: Any) -> Any:
        """The prompt id arrays of the call, and whether it asked for one song."""
        if prompt_ids is not None:
            if caption is not None or lyrics is not None:
                raise ValueError("give caption and lyrics, or prompt_ids, not both")
            # Several songs: a list of arrays (or tensors). A list of lists is one array ([2, P]).
            if isinstance(prompt_ids, (list, tuple)) and prompt_ids and all(
                hasattr(p, "shape") for p in prompt_ids
            ):
                return [_arrays.as_codes(p, "prompt_ids")[0] for p in prompt_ids], False
            return [_arrays.as_codes(prompt_ids, "prompt_ids")[0]], True
        if caption is None or lyrics is None:
            raise ValueError("give caption and lyrics (with a tokenizer), or prompt_ids")
        if isinstance(caption, str) and isinstance(lyrics, str):
            return [self.encode_prompt(caption, lyrics)], True
        captions = [caption] if isinstance(caption, str) else list(caption)
        lyrics_list = [lyrics] if isinstance(lyrics, str) else list(lyrics)
        if len(captions) == 1:
            captions = captions * len(lyrics_list)
        if len(lyrics_list) == 1:
            lyrics_list = lyrics_list * len(captions)
        if len(captions) != len(lyrics_list):
            raise ValueError(f"{len(captions)} captions for {len(lyrics_list)} lyrics")
        return [self.encode_prompt(c, ly) for c, ly in zip(captions, lyrics_list)], False
