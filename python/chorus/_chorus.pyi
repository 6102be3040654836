"""Type stubs of the extension module (Rust, PyO3). Use the wrappers in ``chorus`` instead."""

from typing import List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str
FRAME_SAMPLES: int
SAMPLE_RATE: int
def cuda_available() -> bool:
    """Whether a usable CUDA device is present (loads the driver on first call)."""
    ...

class Decoder:
    """The Mimi slot decoder on its own thread."""

    def __init__(
        self,
        model: str = "kyutai/mimi",
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 64,
        threads: Optional[int] = None,
    ) -> None: ...
    @staticmethod
    def from_tensors(
        config_json: str,
        tensors: Mapping[str, npt.NDArray[np.float32]],
        source: str,
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 64,
        threads: Optional[int] = None,
    ) -> "Decoder": ...
    def decode(self, codes: npt.NDArray[np.int64]) -> npt.NDArray[np.float32]: ...
    def open_slot(self) -> Tuple[int, int]: ...
    def close_slot(self, slot: int, generation: int) -> None: ...
    def reset(self, slot: int, generation: int) -> None: ...
    def step(
        self,
        frames: Sequence[
            Tuple[int, int, Union[npt.NDArray[np.int64], npt.NDArray[np.float32]]]
        ],
    ) -> npt.NDArray[np.float32]: ...
    def stream_decode(
        self,
        slot: int,
        generation: int,
        block: Union[npt.NDArray[np.int64], npt.NDArray[np.float32]],
    ) -> npt.NDArray[np.float32]: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def largest_batch(self) -> int: ...
    @property
    def codebook_size(self) -> int: ...
    @property
    def num_quantizers(self) -> int: ...
    @property
    def latent_dim(self) -> int: ...
    @property
    def frame_samples(self) -> int: ...
    @property
    def sample_rate(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def is_random(self) -> bool: ...
    @property
    def open_streams(self) -> int: ...

class Encoder:
    """The Mimi slot encoder on its own thread (whole signals)."""

    def __init__(
        self,
        model: str = "kyutai/mimi",
        device: str = "auto",
        precision: Optional[str] = None,
        max_streams: int = 16,
        threads: Optional[int] = None,
    ) -> None: ...
    def encode(
        self, audio: npt.NDArray[np.float32], n_q: int, latents: bool = False
    ) -> Tuple[npt.NDArray[np.int64], Optional[npt.NDArray[np.float32]]]: ...
    def encode_files(
        self,
        paths: List[str],
        n_q: int,
        allow_truncated: bool = False,
        readers: Optional[int] = None,
    ) -> List[Union[npt.NDArray[np.int64], str]]: ...
    def open_slot(self) -> Tuple[int, int]: ...
    def close_slot(self, slot: int, generation: int) -> None: ...
    def reset(self, slot: int, generation: int) -> None: ...
    def stream_encode(
        self,
        slot: int,
        generation: int,
        pcm: npt.NDArray[np.float32],
        n_q: int,
        latents: bool = False,
    ) -> Tuple[npt.NDArray[np.int64], Optional[npt.NDArray[np.float32]]]: ...
    @property
    def open_streams(self) -> int: ...
    @property
    def max_streams(self) -> int: ...
    @property
    def num_quantizers(self) -> int: ...
    @property
    def codebook_size(self) -> int: ...
    @property
    def latent_dim(self) -> int: ...
    @property
    def frame_samples(self) -> int: ...
    @property
    def sample_rate(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def source(self) -> str: ...

class MusicStage:
    """The music semantic stage on its own thread."""

    def __init__(
        self,
        model: str,
        device: str = "auto",
        precision: Optional[str] = None,
        max_songs: int = 4,
        max_context: Optional[int] = None,
        threads: Optional[int] = None,
        tokenizer: Optional[str] = None,
    ) -> None: ...
    def encode_prompt(self, caption: str, lyrics: str) -> npt.NDArray[np.int64]: ...
    def add_song(
        self,
        prompt_ids: npt.NDArray[np.int64],
        seconds: float,
        seed: int = 0,
        sampling: str = "seeded",
        allow_end: bool = True,
    ) -> int: ...
    def check_song(
        self, prompt_ids: npt.NDArray[np.int64], seconds: float, sampling: str = "seeded"
    ) -> None: ...
    def step(self) -> List[Tuple[int, int, int, Optional[str]]]: ...
    def take(
        self, song: int
    ) -> Tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16], str]: ...
    def cancel(self, song: int) -> None: ...
    @property
    def active(self) -> int: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def levels(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_songs(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def is_random(self) -> bool: ...
    @property
    def has_tokenizer(self) -> bool: ...

class TtsStage:
    """The CSM speech stage on its own thread (Mimi decode inside every frame)."""

    def __init__(
        self,
        model: str,
        device: str = "auto",
        precision: Optional[str] = None,
        max_utterances: int = 8,
        max_context: Optional[int] = None,
        threads: Optional[int] = None,
        tokenizer: Optional[str] = None,
        mimi: Optional[str] = None,
        temperature: float = 0.9,
        top_k: int = 50,
    ) -> None: ...
    def add(
        self,
        text: Optional[str] = None,
        speaker: int = 0,
        context: List[Tuple[int, str, npt.NDArray[np.int64]]] = ...,
        prompt_ids: Optional[npt.NDArray[np.int64]] = None,
        max_seconds: float = 10.0,
        seed: int = 0,
        sampling: str = "seeded",
    ) -> int: ...
    def step(self) -> List[Tuple[int, int, Optional[str]]]: ...
    def take_new(self, utterance: int) -> npt.NDArray[np.float32]: ...
    def take(
        self, utterance: int
    ) -> Tuple[npt.NDArray[np.int32], npt.NDArray[np.float32], str]: ...
    def cancel(self, utterance: int) -> None: ...
    @property
    def active(self) -> int: ...
    @property
    def codebooks(self) -> int: ...
    @property
    def max_utterances(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def is_random(self) -> bool: ...
