"""Data-set encoding from Python: files of several rates and layouts on the bulk path equal the
CLI's codes and `encode` of each alone; a broken file is named, or skipped when asked."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

import chorus
from conftest import run_cli

N_Q = 4


@pytest.fixture(scope="module")
def encoder():
    # Two slots for five files: slots are reused, each file from the zero state.
    return chorus.MimiEncoder("random", device="cpu", max_streams=2)


def write_wav(path: Path, rate: int, channels: int, seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    pcm = (rng.standard_normal((int(rate * seconds), channels)) * 3000).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return pcm


@pytest.fixture(scope="module")
def data_set(tmp_path_factory):
    d = tmp_path_factory.mktemp("set")
    mono = write_wav(d / "mono24k.wav", 24000, 1, 0.9, 1)
    write_wav(d / "stereo44k.wav", 44100, 2, 0.5, 2)
    write_wav(d / "mono16k.wav", 16000, 1, 1.3, 3)
    write_wav(d / "short48k.wav", 48000, 1, 0.1, 4)
    (d / "broken.wav").write_bytes(b"RIFF not a wave file")
    paths = [d / n for n in ("mono24k.wav", "stereo44k.wav", "broken.wav", "mono16k.wav", "short48k.wav")]
    return d, paths, mono


def test_files_equal_the_cli_and_each_alone(encoder, data_set, tmp_path):
    d, paths, mono = data_set
    got = encoder.encode_files(paths, n_q=N_Q, skip_errors=True)
    assert len(got) == len(paths) and got[2] is None
    for path, codes in zip(paths, got):
        if path.name == "broken.wav":
            continue
        out = tmp_path / (path.stem + ".npy")
        run_cli("encode", "--model", "random", "--device", "cpu", "--n-q", str(N_Q),
                "--audio", str(path), "--out", str(out))
        want = np.load(out)
        assert codes.dtype == np.int64 and codes.shape == want.shape
        np.testing.assert_array_equal(codes, want, err_msg=path.name)
    alone = encoder.encode(mono[:, 0].astype(np.float32) / 32768.0, n_q=N_Q)
    np.testing.assert_array_equal(got[0], alone)


def test_a_broken_file_is_named_after_the_others(encoder, data_set):
    _, paths, _ = data_set
    with pytest.raises(ValueError, match="(?s)1 of 5 file.*broken.wav"):
        encoder.encode_files(paths, n_q=N_Q)
    with pytest.raises(ValueError, match="missing.flac"):
        encoder.encode_files([paths[0], paths[0].with_name("missing.flac")], n_q=N_Q)
    # The encoder goes on working, and an empty list is an empty answer.
    assert encoder.encode_files([str(paths[0])], n_q=2)[0].shape[0] == 2
    assert encoder.encode_files([], n_q=2) == []


@pytest.mark.parametrize("kwargs, message", [({"n_q": 0}, "n_q 0"), ({"n_q": 33}, "n_q 33"),
                                             ({"readers": 0}, "readers")])
def test_bad_arguments_are_refused(encoder, data_set, kwargs, message):
    _, paths, _ = data_set
    with pytest.raises(ValueError, match=message):
        encoder.encode_files(paths[:1], **kwargs)
