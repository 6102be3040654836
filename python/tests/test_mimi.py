"""Mimi decoding from Python: exact against transformers and the CLI, streaming, many streams."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import torch

import chorus
from conftest import FIXTURES, run_cli

#: f32 exactness bound (relative L2) against transformers, as for the Rust decoder.
F32_REL_L2 = 1e-4


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def fixture(case: str):
    codes = np.load(FIXTURES / f"{case}.codes.npy")
    pcm = np.load(FIXTURES / f"{case}.pcm.npy")
    return codes, pcm


@pytest.mark.parametrize("case", ["hf_q8", "hf_q16", "hf_q32"])
def test_decode_matches_transformers_fixtures(decoder, case):
    manifest = json.loads((FIXTURES / "manifest.json").read_text())
    assert any(c["case"] == case for c in manifest["cases"])
    codes, ref = fixture(case)
    pcm = decoder.decode(codes)
    assert pcm.dtype == np.float32 and pcm.shape == (1, codes.shape[-1] * 1920)
    assert rel_l2(pcm.reshape(ref.shape), ref) <= F32_REL_L2


def test_decode_matches_cli(decoder, tmp_path):
    codes = np.random.default_rng(5).integers(0, 2048, size=(3, 8, 20))
    np.save(tmp_path / "codes.npy", codes)
    run_cli("decode", "--model", "random", "--device", "cpu",
            "--codes", str(tmp_path / "codes.npy"), "--out", str(tmp_path / "pcm.npy"))
    cli = np.load(tmp_path / "pcm.npy")
    ours = decoder.decode(codes)
    assert ours.shape == cli.shape == (3, 20 * 1920)
    assert np.abs(ours - cli).max() <= 1e-6


def test_streaming_equals_whole_sequence(decoder):
    codes, _ = fixture("hf_q8")
    codes = codes[:, :30]
    whole = decoder.decode(codes)[0]
    with decoder.stream(n_q=8) as s:
        one = np.concatenate([s.decode(codes[:, t]) for t in range(10)])
        chunk = s.decode(codes[:, 10:30])
    # Whole sequences run 16 frames per step: the same arithmetic in products of other shapes.
    assert np.abs(np.concatenate([one, chunk]) - whole).max() <= 1e-5


def test_many_streams_in_one_step_equal_their_own_decodes(decoder):
    rng = np.random.default_rng(11)
    seqs = [rng.integers(0, 2048, size=(nq, 12)) for nq in (8, 4, 16)]
    refs = [decoder.decode(c)[0] for c in seqs]
    streams = [decoder.stream(n_q=c.shape[0]) for c in seqs]
    outs = [[] for _ in seqs]
    for t in range(12):
        pcm = decoder.step({s: c[:, t] for s, c in zip(streams, seqs)})
        assert list(pcm) == streams
        for i, s in enumerate(streams):
            outs[i].append(pcm[s])
    for s in streams:
        s.close()
    # Whole decodes go in long chunk steps (the same arithmetic in other product shapes).
    for out, ref in zip(outs, refs):
        assert rel_l2(np.concatenate(out), ref) <= 1e-6


def test_a_long_sequence_in_chunks_equals_streaming(decoder):
    # 150 frames: two decode jobs of whole long chunks, the last padded past the end; the
    # stream's pieces of 7 frames go frame by frame.
    codes = np.random.default_rng(5).integers(0, 2048, size=(8, 150))
    whole = decoder.decode(codes)[0]
    assert whole.shape == (150 * 1920,)
    with decoder.stream(n_q=8) as s:
        parts = [s.decode(codes[:, t : t + 7]) for t in range(0, 150, 7)]
    assert rel_l2(np.concatenate(parts), whole) <= 1e-6


def test_reset_returns_a_stream_to_zero(decoder):
    codes = np.random.default_rng(2).integers(0, 2048, size=(8, 6))
    with decoder.stream() as s:
        first = s.decode(codes)
        s.decode(codes)
        s.reset()
        again = s.decode(codes)
    assert np.array_equal(first, again)


def test_slots_are_leased_and_freed():
    dec = chorus.MimiDecoder("random", device="cpu", max_streams=2)
    a, b = dec.stream(), dec.stream()
    assert dec.open_streams == 2
    with pytest.raises(ValueError, match="all 2 streams are open"):
        dec.stream()
    with pytest.raises(ValueError, match="held by open streams"):
        dec.decode(np.zeros((8, 2), dtype=np.int64))
    a.close()
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.decode(np.zeros(8, dtype=np.int64))
    # The freed slot serves a whole-sequence decode beside the open stream, then a new stream.
    two = np.random.default_rng(4).integers(0, 2048, size=(2, 8, 2))
    got = dec.decode(two)
    assert got.shape == (2, 2 * 1920)
    assert np.abs(got[1] - dec.decode(two[1])[0]).max() <= 1e-6
    c = dec.stream()
    assert c.slot == a.slot and dec.open_streams == 2
    b.close()
    c.close()
    assert dec.open_streams == 0


def test_latents_decode_like_their_codes():
    torch.manual_seed(1)
    from transformers import MimiConfig, MimiModel

    model = MimiModel(MimiConfig()).eval()
    dec = chorus.from_transformers(model, device="cpu", max_streams=2)
    codes = torch.randint(0, 2048, (1, 8, 8))
    with torch.no_grad():
        latents = model.quantizer.decode(codes)[0]
    assert latents.shape == (dec.latent_dim, 8)
    ref = dec.decode(codes)[0]
    with dec.stream() as s:
        out = s.decode(latent=latents)
    assert isinstance(out, torch.Tensor)
    assert rel_l2(out.numpy(), ref.numpy()) <= F32_REL_L2
    # Latent and code frames mix in one step.
    s1, s2 = dec.stream(), dec.stream()
    pcm = dec.step({s1: latents[:, 0], s2: codes[0, :, 0]})
    assert rel_l2(pcm[s1].numpy(), ref[:1920].numpy()) <= F32_REL_L2
    assert rel_l2(pcm[s2].numpy(), ref[:1920].numpy()) <= F32_REL_L2


def test_from_transformers_matches_mimimodel_decode():
    from transformers import MimiConfig, MimiModel

    torch.manual_seed(0)
    model = MimiModel(MimiConfig()).eval()
    dec = chorus.from_transformers(model, device="cpu", max_streams=2)
    assert "in memory" in repr(dec)
    codes = torch.randint(0, 2048, (2, 8, 30))
    with torch.no_grad():
        ref = model.decode(codes).audio_values[:, 0]
    out = dec.decode(codes)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    assert out.shape == ref.shape
    assert rel_l2(out.numpy(), ref.numpy()) <= F32_REL_L2


def test_torch_in_torch_out_numpy_in_numpy_out(decoder):
    codes = np.random.default_rng(3).integers(0, 2048, size=(8, 3))
    a = decoder.decode(codes)
    b = decoder.decode(torch.from_numpy(codes).to(torch.int32))
    assert isinstance(a, np.ndarray) and isinstance(b, torch.Tensor)
    assert np.array_equal(a, b.numpy())
    # Python lists are numpy in.
    assert np.array_equal(decoder.decode(codes.tolist()), a)


def test_bad_inputs_raise_value_error_with_the_cli_message(decoder):
    with pytest.raises(ValueError, match=r"code 2048 at stream 0, frame 1, codebook 0 is outside \[0, 2048\)"):
        decoder.decode(np.array([[0, 2048]] + [[0, 0]] * 7))
    with pytest.raises(ValueError, match="integer"):
        decoder.decode(np.zeros((8, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="rank 2"):
        decoder.decode(np.zeros((1, 1, 8, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="n_q = 33"):
        decoder.decode(np.zeros((33, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="1..=32"):
        decoder.stream(n_q=0)
    with decoder.stream(n_q=8) as s:
        with pytest.raises(ValueError, match="opened with n_q = 8"):
            s.decode(np.zeros(4, dtype=np.int64))
        with pytest.raises(ValueError, match="code -1"):
            s.decode(np.array([-1] + [0] * 7))
        with pytest.raises(ValueError, match="latents have shape"):
            s.decode(latent=np.zeros(7, dtype=np.float32))
        # The failed calls left the stream untouched: it still decodes like a fresh one.
        codes = np.zeros((8, 2), dtype=np.int64)
        with decoder.stream(n_q=8) as fresh:
            want = fresh.decode(codes)
        assert np.array_equal(s.decode(codes), want)
    with pytest.raises(ValueError, match="unknown device `tpu`"):
        chorus.MimiDecoder("random", device="tpu")
    with pytest.raises(ValueError, match="f32 only"):
        chorus.MimiDecoder("random", device="cpu", precision="bf16")
    with pytest.raises(OSError, match="no-such-model.safetensors"):
        chorus.MimiDecoder("/no/such/dir/no-such-model.safetensors", device="cpu")


def test_decoding_releases_the_gil(decoder):
    codes = np.random.default_rng(9).integers(0, 2048, size=(8, 60))
    done = threading.Event()
    ticks = 0

    def work():
        decoder.decode(codes)
        done.set()

    t = threading.Thread(target=work)
    start = time.perf_counter()
    t.start()
    while not done.is_set():
        ticks += 1
        time.sleep(0.001)
    t.join()
    elapsed = time.perf_counter() - start
    # With the GIL held for the whole decode this loop could not run at all.
    assert elapsed > 0.1 and ticks >= 20, (elapsed, ticks)


def test_concurrent_decodes_share_the_slots_and_wait_for_each_other():
    dec = chorus.MimiDecoder("random", device="cpu", max_streams=4)
    rng = np.random.default_rng(21)
    jobs = [rng.integers(0, 2048, size=(4, 8, 20)) for _ in range(2)]
    want = [dec.decode(j) for j in jobs]
    got = [None, None]
    errors = []

    def work(i):
        try:
            got[i] = dec.decode(jobs[i])
        except Exception as e:  # noqa: BLE001 - the test reports whatever was raised
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    # A stream opened while the decodes hold every slot waits for one instead of failing.
    with dec.stream() as s:
        assert dec.open_streams == 1
        s.decode(jobs[0][0][:, :2])
    for t in threads:
        t.join()
    assert not errors, errors
    for g, w in zip(got, want):
        assert np.abs(g - w).max() <= 1e-6


def test_a_stream_closed_under_a_running_call_never_touches_the_next_owner():
    dec = chorus.MimiDecoder("random", device="cpu", max_streams=1)
    codes = np.random.default_rng(8).integers(0, 2048, size=(8, 12))
    fresh = dec.decode(codes)[0]
    for _ in range(3):
        s = dec.stream()
        outcome = []

        def work(s=s, outcome=outcome):
            try:
                for _ in range(20):
                    s.decode(codes[:, :6])
                outcome.append("done")
            except ValueError as e:
                outcome.append(str(e))

        t = threading.Thread(target=work)
        t.start()
        time.sleep(0.05)
        s.close()
        with dec.stream() as s2:
            # The slot's next owner decodes exactly like a fresh stream.
            assert np.abs(s2.decode(codes) - fresh).max() <= 1e-6
        t.join()
        assert outcome and (outcome[0] == "done" or "closed" in outcome[0]), outcome


def test_a_refused_block_leaves_the_stream_unchanged(decoder):
    codes = np.random.default_rng(12).integers(0, 2048, size=(8, 8))
    bad = codes.copy()
    bad[3, 5] = 4096
    with decoder.stream() as s:
        with pytest.raises(ValueError, match="frame 5, codebook 3"):
            s.decode(bad)
        assert np.abs(s.decode(codes) - decoder.decode(codes)[0]).max() <= 1e-5


def test_impossible_sizes_and_closed_decoders_raise():
    with pytest.raises(ValueError, match="max_streams"):
        chorus.MimiDecoder("random", device="cpu", max_streams=0)
    with pytest.raises(MemoryError, match="cannot allocate"):
        chorus.MimiDecoder("random", device="cpu", max_streams=10**9)
    dec = chorus.MimiDecoder("random", device="cpu", max_streams=1)
    s = dec.stream()
    dec.close()
    with pytest.raises(ValueError, match="decoder is closed"):
        dec.decode(np.zeros((8, 1), dtype=np.int64))
    with pytest.raises(ValueError, match="decoder is closed"):
        s.decode(np.zeros(8, dtype=np.int64))
    s.close()
    assert isinstance(chorus.cuda_available(), bool)
