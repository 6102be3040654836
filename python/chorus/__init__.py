"""Chorus from Python: exact, streaming Mimi decoding, Mimi encoding, the MiniMax Music 3
semantic stage, Sesame CSM text to speech, and Kyutai speech to text.

The heavy lifting is the Rust runtime (``chorus._chorus``); this package adds numpy and torch in
and out, streams, and the asyncio client of the server protocol (``chorus.client``).
"""

from __future__ import annotations

from ._chorus import FRAME_SAMPLES, SAMPLE_RATE, __version__, cuda_available
from .encoder import MimiEncoder, MimiEncoderStream
from .mimi import MimiDecoder, MimiStream, from_transformers
from .music import MusicSemantic, SemanticSong
from .stt import Stt, SttStream, Word
from .tts import Tts, Utterance

__all__ = [
    "FRAME_SAMPLES",
    "SAMPLE_RATE",
    "MimiDecoder",
    "MimiEncoder",
    "MimiEncoderStream",
    "MimiStream",
    "MusicSemantic",
    "SemanticSong",
    "Stt",
    "SttStream",
    "Tts",
    "Utterance",
    "Word",
    "__version__",
    "cuda_available",
    "from_transformers",
]
