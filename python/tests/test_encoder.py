"""Mimi encoding from Python: transformers' codes, the CLI's codes, batches, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import chorus
from conftest import FIXTURES, run_cli

ENC_FIXTURES = FIXTURES / "encoder"
#: Frames of the fixture used (the streaming state is exact from the first frame).
FRAMES = 40


@pytest.fixture(scope="module")
def encoder():
    """The real Mimi architecture with the seeded random weights the fixtures were made with."""
    return chorus.MimiEncoder("random", device="cpu", max_streams=4)


def rel_l2(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape and np.linalg.norm(want) > 0
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def speech(frames: int = FRAMES) -> np.ndarray:
    return np.load(ENC_FIXTURES / "enc_hf_speech.audio.npy")[: frames * 1920]


def test_encode_gives_transformers_codes_at_every_level(encoder):
    want = np.load(ENC_FIXTURES / "enc_hf_speech.codes.npy")[:, :FRAMES]
    want_latent = np.load(ENC_FIXTURES / "enc_hf_speech.latent.npy")[:FRAMES]
    codes, latents = encoder.encode(speech(), n_q=32, latents=True)
    assert codes.dtype == np.int64 and codes.shape == (32, FRAMES)
    np.testing.assert_array_equal(codes, want)
    assert latents.dtype == np.float32 and latents.shape == (FRAMES, encoder.latent_dim)
    rel = np.linalg.norm(latents - want_latent) / np.linalg.norm(want_latent)
    assert rel <= 1e-4


def test_encode_matches_the_cli_and_decodes(encoder, tmp_path):
    import wave

    # A 16-bit WAV the CLI reads; the same samples, as floats, go to Python.
    rng = np.random.default_rng(11)
    pcm16 = (rng.standard_normal(1920 * 5 + 700) * 3000).astype(np.int16)
    with wave.open(str(tmp_path / "in.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(24000)
        w.writeframes(pcm16.tobytes())
    run_cli("encode", "--model", "random", "--device", "cpu", "--n-q", "8",
            "--audio", str(tmp_path / "in.wav"), "--out", str(tmp_path / "codes.npy"))
    cli = np.load(tmp_path / "codes.npy")
    ours = encoder.encode(pcm16.astype(np.float32) / 32768.0, n_q=8)
    # Six frames: the last one holds 700 samples and is padded with silence.
    assert ours.shape == cli.shape == (8, 6)
    np.testing.assert_array_equal(ours, cli)
    pcm = chorus.MimiDecoder("random", device="cpu", max_streams=1).decode(ours)
    assert pcm.shape == (1, 6 * 1920)


def test_a_batch_equals_each_signal_alone(encoder):
    # Five signals on four streams: two groups, each from the zero state.
    rng = np.random.default_rng(3)
    audio = (rng.standard_normal((5, 1920 * 3 + 11)) * 0.1).astype(np.float32)
    batch = encoder.encode(audio, n_q=4)
    assert batch.shape == (5, 4, 4)
    for b in range(5):
        np.testing.assert_array_equal(batch[b], encoder.encode(audio[b], n_q=4))
    assert (batch >= 0).all() and (batch < encoder.codebook_size).all()


def test_torch_in_torch_out(encoder):
    audio = torch.from_numpy(speech(3))
    codes = encoder.encode(audio, n_q=8)
    assert isinstance(codes, torch.Tensor) and codes.dtype == torch.int64
    np.testing.assert_array_equal(codes.numpy(), encoder.encode(speech(3), n_q=8))


@pytest.mark.parametrize(
    "audio, n_q, message",
    [
        (np.zeros(1920, np.float32), 0, "n_q 0"),
        (np.zeros(1920, np.float32), 33, "n_q 33"),
        (np.array([0.0, np.nan, 0.0], np.float32), 8, "sample 1"),
        (np.zeros((2, 2, 1920), np.float32), 8, "shape"),
        (np.zeros(1920, np.int16), 8, "float"),
    ],
)
def test_bad_input_is_refused_by_name(encoder, audio, n_q, message):
    with pytest.raises(ValueError, match=message):
        encoder.encode(audio, n_q=n_q)
    # The encoder goes on working.
    assert encoder.encode(speech(1), n_q=2).shape == (2, 1)


def test_a_missing_checkpoint_is_refused(tmp_path):
    with pytest.raises((ValueError, OSError)):
        chorus.MimiEncoder(str(tmp_path / "missing.safetensors"), device="cpu")


def test_a_stream_in_chunks_equals_the_whole_encode(encoder):
    audio = speech(6)[: 6 * 1920 - 500]  # five whole frames and a partial one
    whole, whole_lat = encoder.encode(audio, n_q=8, latents=True)
    parts, lats = [], []
    with encoder.stream(n_q=8) as s:
        for chunk in np.split(audio, [1, 700, 5000, 5001, 9000]):
            codes, lat = s.encode(chunk, latents=True)
            assert codes.shape[0] == 8 and lat.shape == (codes.shape[1], encoder.latent_dim)
            parts.append(codes)
            lats.append(lat)
        assert s.pending_samples == 1920 - 500
        tail, tail_lat = s.flush(latents=True)
        assert tail.shape == (8, 1) and s.pending_samples == 0
        assert s.flush().shape == (8, 0)
    np.testing.assert_array_equal(np.concatenate(parts + [tail], axis=1), whole)
    # Whole signals go in long chunk steps: the same arithmetic in other product shapes.
    assert rel_l2(np.concatenate(lats + [tail_lat]), whole_lat) <= 1e-6
    assert s.closed


def test_streams_are_independent_of_whole_encodes_and_each_other(encoder):
    a, b = speech(4), speech(4)[::-1].copy()
    with encoder.stream(n_q=4) as sa, encoder.stream(n_q=4) as sb:
        first = sa.encode(a[:3840])
        # A whole-signal encode and another stream run between the stream's chunks.
        encoder.encode(b, n_q=4)
        sb.encode(b)
        rest = sa.encode(a[3840:])
        assert encoder.open_streams == 2
    np.testing.assert_array_equal(np.concatenate([first, rest], axis=1), encoder.encode(a, n_q=4))
    assert encoder.open_streams == 0


def test_reset_and_closed_streams(encoder):
    a = speech(2)
    with encoder.stream(n_q=2) as s:
        s.encode(speech(3))
        s.encode(np.zeros(100, np.float32))
        s.reset()
        assert s.pending_samples == 0
        np.testing.assert_array_equal(s.encode(a), encoder.encode(a, n_q=2))
        with pytest.raises(ValueError, match="sample 2"):
            s.encode(np.array([0.0, 0.0, np.inf], np.float32))
    with pytest.raises(ValueError, match="closed"):
        s.encode(a)
    with pytest.raises(ValueError, match="n_q"):
        encoder.stream(n_q=0)


#: Frames of a signal longer than two encode jobs of whole long-chunk steps (2 x 48 frames), its
#: last job one chunk and a part; the last frame partial.
LONG_FRAMES = 150


def long_signal() -> np.ndarray:
    rng = np.random.default_rng(23)
    t = np.arange(LONG_FRAMES * 1920 - 333) / 24000.0
    tone = 0.3 * np.sin(2 * np.pi * 210.0 * t) + 0.05 * rng.standard_normal(t.size)
    return tone.astype(np.float32)


def streamed_in_pieces(encoder, audio: np.ndarray, piece_frames: int, n_q: int):
    """Codes and latents of ``audio`` through one stream in pieces of ``piece_frames`` frames."""
    codes, lats = [], []
    with encoder.stream(n_q=n_q) as s:
        for at in range(0, audio.size, piece_frames * 1920):
            c, lat = s.encode(audio[at : at + piece_frames * 1920], latents=True)
            codes.append(c)
            lats.append(lat)
        c, lat = s.flush(latents=True)
    return np.concatenate(codes + [c], axis=1), np.concatenate(lats + [lat])


def test_stream_pieces_shorter_than_a_chunk_are_not_padded(encoder):
    # Regression: a stream's pieces were staged like a signal's end, padded with silence to a
    # whole chunk, so the stream's state ran past the piece and later codes changed.
    audio = speech(12)
    with encoder.stream(n_q=8) as s:
        want = np.concatenate([s.encode(audio[f * 1920 : (f + 1) * 1920]) for f in range(12)], axis=1)
    got, _ = streamed_in_pieces(encoder, audio, 5, 8)
    np.testing.assert_array_equal(got, want)


def test_a_long_signal_in_chunks_equals_streaming_frame_by_frame(encoder):
    audio = long_signal()
    # Pieces of 7 frames are below a chunk: frame steps, the streaming reference.
    want, want_lat = streamed_in_pieces(encoder, audio, 7, 8)
    assert want.shape == (8, LONG_FRAMES) and len(np.unique(want[0])) > 10
    whole, whole_lat = encoder.encode(audio, n_q=8, latents=True)
    np.testing.assert_array_equal(whole, want)
    assert rel_l2(whole_lat, want_lat) <= 1e-6
    # A stream's pieces of a chunk and more: chunk steps, the rest frame by frame, unpadded.
    pieces, pieces_lat = streamed_in_pieces(encoder, audio, 100, 8)
    np.testing.assert_array_equal(pieces, want)
    assert rel_l2(pieces_lat, want_lat) <= 1e-6
    # Beside other signals (a batch of three, one padding row in the bucket of four).
    batch = encoder.encode(np.stack([audio[::-1], audio, audio * 0.5]), n_q=8)
    np.testing.assert_array_equal(batch[1], want)
