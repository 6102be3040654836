"""chorus.Tts on random-small (CPU): audio of every frame, seeds repeat, streaming equals the
whole utterance, batches equal single runs, per-utterance temperature and top-k, and bad inputs
raise with a clear message."""

import numpy as np
import pytest

import chorus


@pytest.fixture(scope="module")
def tts():
    return chorus.Tts("random-small", device="cpu", threads=1, max_utterances=3)


def test_say_gives_every_frames_audio_and_repeats_with_its_seed(tts):
    u = tts.say("How are you?", max_seconds=1.2, seed=3)
    assert u.end == "max_frames"
    assert u.codes.shape == (15, 8) and u.codes.dtype == np.int32
    assert u.audio.shape == (15 * chorus.FRAME_SAMPLES,) and u.audio.dtype == np.float32
    assert np.isfinite(u.audio).all() and np.abs(u.audio).max() > 0
    again = tts.say("How are you?", max_seconds=1.2, seed=3)
    np.testing.assert_array_equal(again.codes, u.codes)
    np.testing.assert_array_equal(again.audio, u.audio)
    other = tts.say("How are you?", max_seconds=1.2, seed=4)
    assert not np.array_equal(other.codes, u.codes)


def test_stream_chunks_are_the_whole_utterance(tts):
    whole = tts.say("Streaming now.", max_seconds=0.8, seed=1)
    chunks = list(tts.stream("Streaming now.", max_seconds=0.8, seed=1))
    assert len(chunks) == whole.codes.shape[0]
    assert all(c.shape == (chorus.FRAME_SAMPLES,) for c in chunks)
    np.testing.assert_array_equal(np.concatenate(chunks), whole.audio)


def test_a_batch_equals_each_utterance_alone(tts):
    texts = ["One.", "Two two.", "Three three three.", "Four."]
    batch = tts.generate(texts, max_seconds=0.8, seed=10)
    for i, t in enumerate(texts):
        alone = tts.generate([t], max_seconds=0.8, seed=10 + i)[0]
        np.testing.assert_array_equal(batch[i].codes, alone.codes)
        np.testing.assert_array_equal(batch[i].audio, alone.audio)


def test_context_turns_and_bad_inputs(tts):
    ctx = [(0, "Hello there.", np.full((3, 8), 2, dtype=np.int64))]
    u = tts.say("Hi.", context=ctx, max_seconds=0.4)
    assert u.codes.shape[0] == 5
    with pytest.raises(Exception, match="expected \\[T, 8\\]"):
        tts.say("Hi.", context=[(0, "x", np.zeros((3, 5), dtype=np.int64))])
    with pytest.raises(Exception, match="outside"):
        tts.say("Hi.", context=[(0, "x", np.full((2, 8), 2000, dtype=np.int64))])
    with pytest.raises(Exception, match="give text"):
        tts.say(None)
    with pytest.raises(Exception, match="unknown sampling mode"):
        tts.say("Hi.", sampling="fancy")
    assert tts._stage.active == 0


def _run_stage(tts, adds):
    """Adds every utterance (keyword arguments of ``TtsStage.add``) to one stage, steps until all
    end, and returns their codes in order."""
    ids = [tts._stage.add(**kw) for kw in adds]
    done = {}
    while len(done) < len(ids):
        for uid, _, end in tts._stage.step():
            if end is not None and uid in ids:
                done[uid] = tts._stage.take(uid)[0]
    return [done[i] for i in ids]


def test_each_utterance_keeps_its_own_temperature_and_top_k(tts):
    adds = [
        dict(text="Narrow.", max_seconds=0.8, seed=2, temperature=0.3, top_k=2),
        dict(text="Wide.", max_seconds=0.8, seed=2, temperature=3.0, top_k=2051),
        dict(text="Plain.", max_seconds=0.8, seed=2),
    ]
    together = _run_stage(tts, adds)
    for kw, codes in zip(adds, together):
        np.testing.assert_array_equal(codes, _run_stage(tts, [kw])[0])
    narrow = tts.say("Narrow.", max_seconds=0.8, seed=2, temperature=0.3, top_k=2)
    np.testing.assert_array_equal(narrow.codes, together[0])
    default = tts.say("Narrow.", max_seconds=0.8, seed=2)
    assert not np.array_equal(default.codes, narrow.codes)
    greedy = tts.say("Plain.", max_seconds=0.8, sampling="greedy")
    np.testing.assert_array_equal(tts.say("Plain.", max_seconds=0.8, temperature=0.0).codes, greedy.codes)
    for kw, needle in [
        (dict(temperature=-1.0), "temperature -1"),
        (dict(temperature=float("nan")), "temperature NaN"),
        (dict(top_k=0), "top_k 0"),
        (dict(top_k=2052), "top_k 2052"),
    ]:
        with pytest.raises(Exception, match=needle):
            tts.say("Hi.", **kw)
    assert tts._stage.active == 0
