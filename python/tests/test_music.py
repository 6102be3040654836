"""The music semantic stage from Python: exact against the oracle and the CLI, many songs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file
from safetensors.torch import load_file as load_torch

import chorus
from conftest import FIXTURES, run_cli

MUSIC = FIXTURES / "music"
#: Relative L2 of bf16 frame hiddens against the f32 oracle: bf16 keeps 8 significant bits.
BF16_REL_L2 = 4e-3

#: A tiny WordLevel tokenizer carrying the checkpoint's special-token ids.
SPECIALS = {
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|audio_start|>": 151669,
    "<|caption_start|>": 151671,
    "<|caption_end|>": 151672,
    "<|lyrics_start|>": 151673,
    "<|lyrics_end|>": 151674,
}
WORDS = {"[UNK]": 0, "[": 10, "]": 11, "verse": 21, "chorus": 22, "genre": 30, "is": 31,
         "pop": 32, "hello": 40, "world": 41}


@pytest.fixture(scope="module")
def stage():
    return chorus.MusicSemantic("random-small", device="cpu", max_songs=2, max_context=256)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t, i in SPECIALS.items()]
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
           "decoder": None,
           "model": {"type": "WordLevel", "vocab": {**WORDS, **SPECIALS}, "unk_token": "[UNK]"}}
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    path.write_text(json.dumps(doc))
    return path


def prompt(seed: int, length: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(1000, 5000, size=length)


def test_noise_mode_matches_the_transformers_oracle(stage):
    manifest = json.loads((MUSIC / "manifest.json").read_text())
    case = manifest["cases"]["small_noise"]
    ref = load_file(str(MUSIC / case["file"]))
    song = stage.generate(prompt_ids=ref["prompt_ids"], seconds=1, seed=case["noise_seed"],
                          sampling="noise", allow_end=False)
    n = case["max_frames"]
    # Loop frame 0 is fed back, not emitted: emitted frame t is the oracle's frame t + 1.
    assert np.array_equal(song.codes[:n], ref["codes"][1 : n + 1])
    hid = song.frame_hiddens[0, :n].float().numpy()
    want = ref["frame_hiddens"]
    assert np.linalg.norm(hid - want) / np.linalg.norm(want) <= BF16_REL_L2


def test_generate_matches_the_cli(stage, tmp_path):
    ids = np.stack([prompt(1), prompt(1)])
    ids[1, 1:-2] = 151654
    np.save(tmp_path / "ids.npy", ids)
    run_cli("music", "--model", "random-small", "--device", "cpu", "--prompt-ids",
            str(tmp_path / "ids.npy"), "--seconds", "2", "--seed", "5", "--out",
            str(tmp_path / "song.safetensors"))
    cli = load_torch(str(tmp_path / "song.safetensors"))
    song = stage.generate(prompt_ids=ids, seconds=2, seed=5)
    assert song.codes.dtype == np.int32 and song.codes.shape == tuple(cli["codes"].shape)
    assert np.array_equal(song.codes, cli["codes"].numpy())
    hid = song.frame_hiddens
    assert hid.dtype == torch.bfloat16 and hid.shape == (1, song.frames, 8 * stage.hidden_size)
    assert torch.equal(hid[0], cli["frame_hiddens"])


def test_caption_and_lyrics_match_the_cli(tokenizer, tmp_path):
    stage = chorus.MusicSemantic("random-small", device="cpu", max_songs=1, max_context=256,
                                 tokenizer=tokenizer)
    lyrics = "[verse]\nhello world\n[chorus]\nhello"
    (tmp_path / "lyrics.txt").write_text(lyrics)
    run_cli("music", "--model", "random-small", "--device", "cpu", "--caption", "genre is pop",
            "--lyrics", str(tmp_path / "lyrics.txt"), "--tokenizer", str(tokenizer),
            "--seconds", "1", "--seed", "2", "--out", str(tmp_path / "song.safetensors"))
    cli = load_torch(str(tmp_path / "song.safetensors"))
    ids = stage.encode_prompt("genre is pop", lyrics)
    assert ids.shape[0] == 2 and ids[0, 0] == SPECIALS["<|im_start|>"]
    assert ids[0, -1] == SPECIALS["<|audio_start|>"] and (ids[1, 1:-2] == 151654).all()
    song = stage.generate(caption="genre is pop", lyrics=lyrics, seconds=1, seed=2)
    assert np.array_equal(song.codes, cli["codes"].numpy())


def test_several_songs_in_one_call_equal_each_alone(stage):
    prompts = [prompt(2), prompt(3, 30), prompt(4, 50)]
    seeds = [7, 8, 9]
    alone = [stage.generate(prompt_ids=p, seconds=1, seed=s) for p, s in zip(prompts, seeds)]
    seen = []
    together = stage.generate(prompt_ids=prompts, seconds=1, seed=seeds,
                              progress=lambda i, done, total: seen.append((i, done, total)))
    assert len(together) == 3  # three songs through two slots
    for a, b in zip(alone, together):
        assert np.array_equal(a.codes, b.codes)
        assert torch.equal(a.frame_hiddens, b.frame_hiddens)
        assert b.end == "max_frames" and b.seconds == 1.0
    for i in range(3):
        done = [d for j, d, _ in seen if j == i]
        assert done == list(range(1, 26))
    # Different seeds give different songs.
    assert not np.array_equal(together[0].codes, together[1].codes)


def test_interrupt_cancels_every_song_and_the_stage_goes_on(stage):
    def stop(i, done, total):
        if done == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stage.generate(prompt_ids=[prompt(5), prompt(6)], seconds=2, progress=stop)
    assert stage._core.active == 0
    assert stage.generate(prompt_ids=prompt(5), seconds=1).frames == 25


def test_bad_requests_raise_and_change_nothing(stage, tmp_path):
    with pytest.raises(ValueError, match="no tokenizer"):
        stage.generate(caption="a", lyrics="b")
    with pytest.raises(ValueError, match="outside 1..=360"):
        stage.generate(prompt_ids=prompt(1), seconds=0.5)
    with pytest.raises(ValueError, match="unknown sampling mode `top_p`"):
        stage.generate(prompt_ids=prompt(1), sampling="top_p")
    with pytest.raises(ValueError, match="negative"):
        stage.generate(prompt_ids=np.array([5, -1, 7]))
    with pytest.raises(ValueError, match="expected an integer array"):
        stage.generate(prompt_ids=np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match=r"shape \[3, 4\]"):
        stage.generate(prompt_ids=np.zeros((3, 4), dtype=np.int64))
    with pytest.raises(ValueError, match="2 seeds for 3 songs"):
        stage.generate(prompt_ids=[prompt(1)] * 3, seed=[1, 2])
    with pytest.raises(ValueError, match="not both"):
        stage.generate(caption="a", lyrics="b", prompt_ids=prompt(1))
    with pytest.raises(ValueError, match="positions"):
        stage.generate(prompt_ids=prompt(1), seconds=30)
    assert stage._core.active == 0
    with pytest.raises(OSError):
        chorus.MusicSemantic(str(tmp_path / "missing"), device="cpu")


def test_prompt_forms_and_seeds(stage):
    cond = prompt(31, 30)
    pair = np.stack([cond, cond])
    pair[1, 1:-2] = 151654
    one = stage.generate(prompt_ids=pair.tolist(), seconds=1, seed=3)
    assert isinstance(one, chorus.SemanticSong), "a nested list is one [2, P] prompt"
    assert np.array_equal(one.codes, stage.generate(prompt_ids=cond, seconds=1, seed=3).codes)
    two = stage.generate(prompt_ids=[cond, cond], seconds=1, seed=np.array([3, 4]))
    assert np.array_equal(two[0].codes, one.codes)
    assert not np.array_equal(two[1].codes, one.codes)
    with pytest.raises(ValueError, match="empty"):
        stage.generate(prompt_ids=np.array([], dtype=np.int64))


def test_a_bad_song_is_refused_before_any_starts(stage):
    seen = []
    bad = np.array([5, -1, 7])
    with pytest.raises(ValueError, match="negative"):
        stage.generate(prompt_ids=[prompt(1), prompt(2), bad], seconds=1,
                       progress=lambda *a: seen.append(a))
    assert seen == [] and stage._core.active == 0
    with pytest.raises(ValueError, match="max_songs"):
        chorus.MusicSemantic("random-small", device="cpu", max_songs=0)
