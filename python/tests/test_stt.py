"""chorus.Stt on the CPU with random-small and the random Mimi: a file and the same samples as an
array give `chorus transcribe`'s words and times; a stream fed odd chunks gives the same words;
streams side by side equal each alone; bad input is a named error that leaves the stream usable;
a full stage refuses a stream."""

from __future__ import annotations

import wave

import numpy as np
import pytest

import chorus

from conftest import run_cli

RATE = 24_000


def tone(seconds: float = 1.5, pitch: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE), dtype=np.float64) / RATE
    x = 0.3 * np.sin(2 * np.pi * pitch * t) * np.sin(2 * np.pi * 1.3 * t)
    return x.astype(np.float32)


def write_wav(path, x: np.ndarray) -> np.ndarray:
    """Writes s16 and returns the samples as the file holds them, back in float32."""
    s16 = np.clip(np.round(x * 32767.0), -32768, 32767).astype(np.int16)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(s16.tobytes())
    return s16.astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def stt():
    return chorus.Stt("random-small", device="cpu", mimi="random", max_streams=2, threads=1)


def as_rows(words):
    return [(f"{w.start:.2f}", "" if w.end is None else f"{w.end:.2f}", w.text) for w in words]


def cli_rows(path):
    out = run_cli(
        "transcribe", "--model", "random-small", "--device", "cpu", "--threads", "1",
        "--audio", str(path), "--timestamps",
    ).stdout
    return [tuple(line.split("\t")) for line in out.splitlines()[1:] if line.count("\t") == 2]


def test_file_and_array_give_the_cli_words(stt, tmp_path):
    path = tmp_path / "tone.wav"
    samples = write_wav(path, tone())
    want = cli_rows(path)
    assert want, "the CLI printed no words: the comparison would be empty"
    assert as_rows(stt.transcribe(path)) == want
    assert as_rows(stt.transcribe(samples)) == want
    s16 = np.round(samples * 32768.0).astype(np.int16)
    assert as_rows(stt.transcribe(s16)) == want


def test_a_stream_fed_odd_chunks_equals_the_whole(stt):
    x = tone(2.0, 180.0)
    whole = stt.transcribe(x)
    s = stt.stream()
    words = []
    for i in range(0, len(x), 1001):
        words += s.feed(x[i : i + 1001])
    words += s.finish()
    assert as_rows(words) == as_rows(whole)
    assert s.vad.shape[1] == 4 and s.vad.shape[0] > 0
    assert np.all((s.vad >= 0) & (s.vad <= 1))
    assert s.finish() == []


def test_streams_side_by_side_equal_each_alone(stt):
    a, b = tone(1.2, 200.0), tone(1.7, 330.0)
    alone = [as_rows(stt.transcribe(a)), as_rows(stt.transcribe(b))]
    sa, sb = stt.stream(), stt.stream()
    wa, wb = [], []
    for i in range(0, max(len(a), len(b)), 2500):
        if i < len(a):
            wa += sa.feed(a[i : i + 2500])
        if i < len(b):
            wb += sb.feed(b[i : i + 2500])
    wa += sa.finish()
    wb += sb.finish()
    assert [as_rows(wa), as_rows(wb)] == alone


def test_bad_input_is_named_and_the_stream_goes_on(stt):
    s = stt.stream()
    bad = np.zeros(3000, dtype=np.float32)
    bad[17] = np.nan
    with pytest.raises(Exception, match="sample 17 of 3000 is not finite"):
        s.feed(bad)
    with pytest.raises(ValueError, match="mono"):
        s.feed(np.zeros((2, 100), dtype=np.float32))
    with pytest.raises(ValueError, match="int16"):
        s.feed(np.zeros(100, dtype=np.int32))
    x = tone(1.0)
    words = s.feed(x) + s.finish()
    assert as_rows(words) == as_rows(stt.transcribe(x))
    with pytest.raises(RuntimeError, match="finished"):
        s.feed(x)


def test_a_full_stage_refuses_a_stream(stt):
    held = [stt.stream(), stt.stream()]
    with pytest.raises(Exception, match="stream"):
        stt.stream()
    for s in held:
        s.finish()
    stt.stream().finish()


def test_a_missing_file_is_named(stt, tmp_path):
    with pytest.raises(Exception, match="nope.wav"):
        stt.transcribe(tmp_path / "nope.wav")
