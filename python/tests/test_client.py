"""`chorus.client` against a real `chorus serve` on loopback (CPU backend, random weights).

The binary comes from `CHORUS_BIN`, else `<repo>/target/release/chorus`
(`cargo build --release -p chorus`). References come from `chorus decode` on the same random
weights. The CPU backend is batch-invariant (docs/protocol.md, "exactness check"): a stream's PCM
equals the whole-file decode bit for bit here, and a batch file decodes each row as it would
alone. `ATOL` (a few ulps of samples near 1) only allows for a build that rounds differently;
a wrong frame, a missed reset or a lost decoder state differs by more than 1e-3.
"""

from __future__ import annotations

import asyncio
import re
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Coroutine, Dict, Iterator, List, NoReturn, Tuple, TypeVar

import numpy as np
import pytest

from chorus import client
from conftest import chorus_bin

REPO = Path(__file__).resolve().parents[2]
N_Q = 8
FRAMES = 20
FRAME = client.FRAME_SAMPLES
ATOL = 1e-6
# A few ids below the real 200,000-token vocabulary that random-small keeps.
PROMPT = [151644, 1012, 2500, 7, 99, 151645, 151669]
SERVER_START_S = 60.0

_T = TypeVar("_T")


def run(coro: Coroutine[Any, Any, _T]) -> _T:
    """Runs one test's coroutine with a hard bound, so that a hang fails instead of blocking."""
    return asyncio.run(asyncio.wait_for(coro, 30.0))


class Server:
    """A `chorus serve` child process on a port the OS picked."""

    def __init__(self, *extra: str) -> None:
        self.log = tempfile.TemporaryFile()
        args = [
            str(chorus_bin()),
            "serve",
            "--model",
            "random",
            "--device",
            "cpu",
            "--max-streams",
            "8",
            "--port",
            "0",
            *extra,
        ]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log)
        self.base = f"http://127.0.0.1:{self._port()}"
        self.ws = self.base.replace("http://", "ws://")
        try:
            asyncio.run(client.wait_ready(self.base, timeout=SERVER_START_S))
        except asyncio.TimeoutError:
            self._fail("chorus serve never became ready")

    def _port(self) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + SERVER_START_S
        line = b""
        while time.monotonic() < deadline and self.proc.poll() is None:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.1)
            if ready:
                line = self.proc.stdout.readline()
                match = re.search(rb"listening on http://[^:]+:(\d+)", line)
                if match:
                    return int(match.group(1))
        self._fail(f"chorus serve did not start: {line!r}")

    def _fail(self, why: str) -> NoReturn:
        self.log.seek(0)
        log = self.log.read().decode(errors="replace")[-4000:]
        self.stop()
        pytest.fail(f"{why}\n{log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.log.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server("--music-model", "random-small", "--music-songs", "2", "--music-context", "256")
    yield srv
    srv.stop()


def reference_decode(batch: np.ndarray) -> np.ndarray:
    """`chorus decode` of codes `[B, n_q, T]`: float32 `[B, T * 1920]`."""
    with tempfile.TemporaryDirectory() as tmp:
        codes, out = Path(tmp, "codes.npy"), Path(tmp, "pcm.npy")
        np.save(codes, batch.astype(np.int64))
        done = subprocess.run(
            [
                str(chorus_bin()),
                "decode",
                "--model",
                "random",
                "--device",
                "cpu",
                "--codes",
                str(codes),
                "--out",
                str(out),
            ],
            capture_output=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        pcm = np.load(out)
    assert pcm.shape == (batch.shape[0], batch.shape[2] * FRAME)
    return pcm


@pytest.fixture(scope="module")
def refs() -> Tuple[np.ndarray, np.ndarray]:
    """Six seeded code sequences `[6, n_q, FRAMES]` and their whole-file decodes."""
    codes = np.random.default_rng(1234).integers(0, 2048, size=(6, N_Q, FRAMES))
    return codes, reference_decode(codes)


def assert_pcm_equal(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == np.float32
    assert got.shape == want.shape
    diff = float(np.abs(got - want).max())
    assert diff <= ATOL, f"max abs diff {diff}"


def s16(pcm: np.ndarray) -> np.ndarray:
    """The protocol's s16 conversion, scaled back as the client returns it."""
    x = np.clip(pcm.astype(np.float64), -1.0, 1.0) * 32767.0
    return (np.sign(x) * np.floor(np.abs(x) + 0.5) / 32767.0).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# Streams


def test_stream_decode_equals_whole_file_decode(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> Tuple[np.ndarray, Dict[str, Any]]:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            pcm = await stream.decode(codes[0])
            return pcm, stream.opened

    pcm, opened = run(go())
    assert opened["n_q"] == N_Q and opened["pcm"] == "f32"
    assert opened["sample_rate"] == client.SAMPLE_RATE
    assert opened["frame_samples"] == FRAME
    assert opened["codebook_size"] == 2048
    assert_pcm_equal(pcm, want[0])


def test_frames_come_back_one_by_one_in_order(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> List[np.ndarray]:
        got: List[np.ndarray] = []
        async with client.connect(server.ws + "/v1/stream", n_q=N_Q) as stream:
            # One frame as a list of ints, one as a [n_q] array, then [n_q, k] blocks.
            assert await stream.send([int(c) for c in codes[1][:, 0]]) == 1
            assert await stream.send(codes[1][:, 1].astype(np.uint16)) == 1
            got.append(await stream.recv())
            got.append(await stream.recv())
            for start in range(2, FRAMES, 6):
                k = await stream.send(codes[1][:, start : start + 6])
                for _ in range(k):
                    got.append(await stream.recv(timeout=10))
            assert stream.frames_sent == stream.frames_received == FRAMES
            assert stream.in_flight == 0
        return got

    got = run(go())
    assert len(got) == FRAMES
    for i, frame in enumerate(got):
        assert_pcm_equal(frame, want[1][i * FRAME : (i + 1) * FRAME])


def test_reset_decodes_like_a_fresh_stream(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> Tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.send(codes[2][:, :7])
            next_frame = await stream.reset()
            # The PCM of the 7 frames before the reset is buffered, not yet received.
            with pytest.raises(RuntimeError):
                await stream.decode(codes[3])
            before = np.concatenate([await stream.recv() for _ in range(7)])
            after = await stream.decode(codes[3])
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.decode(codes[2][:, :7])
            no_reset = await stream.decode(codes[3])
        return next_frame, before, after, no_reset

    next_frame, before, after, no_reset = run(go())
    assert next_frame == 7
    # Mimi decodes causally: the first 7 frames are the head of the whole-file decode.
    assert_pcm_equal(before, want[2][: 7 * FRAME])
    assert_pcm_equal(after, want[3])
    # Without the reset the decoder state carries over, so the same codes sound different.
    assert float(np.abs(no_reset - want[3]).max()) > 1e-3


def test_close_delivers_every_frame_already_sent(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> Tuple[int, np.ndarray, bool]:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.send(codes[4])
            frames = await stream.close()
            pcm = np.concatenate([frame async for frame in stream])
            with pytest.raises(client.StreamClosed):
                await stream.recv()
            with pytest.raises(client.StreamClosed):
                await stream.send(codes[4][:, 0])
            return frames, pcm, stream.closed

    frames, pcm, closed = run(go())
    assert frames == FRAMES
    assert closed
    assert_pcm_equal(pcm, want[4])


def test_sending_past_the_window_while_another_task_receives(server: Server) -> None:
    codes = np.random.default_rng(77).integers(0, 2048, size=(N_Q, 90))

    async def go() -> Tuple[np.ndarray, np.ndarray, int]:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            assert codes.shape[1] > 2 * stream.max_pending_frames

            async def produce() -> int:
                # 90 frames at once: send() must read PCM ahead to stay within the window.
                await stream.send(codes[:, :45])
                for start in range(45, 90, 7):
                    await stream.send(codes[:, start : start + 7])
                return await stream.close()

            async def consume() -> np.ndarray:
                return np.concatenate([frame async for frame in stream])

            closed, pcm = await asyncio.gather(produce(), consume())
        whole = await client.decode_http(server.base, codes)
        return pcm, whole, closed

    pcm, whole, closed = run(go())
    assert closed == 90
    assert_pcm_equal(pcm, whole)


def test_recv_timeout_leaves_the_stream_usable(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> np.ndarray:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            with pytest.raises(asyncio.TimeoutError):
                await stream.recv(timeout=0.2)
            await stream.send(codes[0][:, :2])
            return np.concatenate([await stream.recv(timeout=10) for _ in range(2)])

    assert_pcm_equal(run(go()), want[0][: 2 * FRAME])


def test_concurrent_streams_each_equal_their_reference(
    server: Server, refs: Tuple[Any, Any]
) -> None:
    codes, want = refs

    async def one(i: int, pcm: str) -> np.ndarray:
        async with client.connect(server.ws, n_q=N_Q, pcm=pcm) as stream:
            # Mixed pacing: even streams all at once, odd ones a frame at a time.
            if i % 2 == 0:
                return await stream.decode(codes[i])
            out = []
            for t in range(FRAMES):
                await stream.send(codes[i][:, t])
                out.append(await stream.recv())
            return np.concatenate(out)

    async def go() -> List[np.ndarray]:
        return list(await asyncio.gather(*(one(i, "f32" if i < 4 else "s16") for i in range(6))))

    results = run(go())
    for i in range(4):
        assert_pcm_equal(results[i], want[i])
    for i in range(4, 6):
        # s16 samples are the rounded f32 samples: at most one step of rounding apart.
        assert float(np.abs(results[i] - s16(want[i])).max()) <= 1.0 / 32767 + 1e-7


def test_client_side_validation_raises_value_error(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> np.ndarray:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            with pytest.raises(ValueError, match="rows"):
                await stream.send(codes[0][:4])  # n_q 4 on an n_q 8 stream
            with pytest.raises(ValueError, match="2048"):
                await stream.send(np.full(N_Q, 2048))
            with pytest.raises(ValueError, match="-1"):
                await stream.send([-1] * N_Q)
            with pytest.raises(ValueError, match="integers"):
                await stream.send(np.zeros(N_Q, dtype=np.float32))
            with pytest.raises(ValueError):
                await stream.send(np.zeros((N_Q, 0), dtype=np.int64))
            assert stream.frames_sent == 0
            # Nothing was sent, so the stream is still healthy.
            return await stream.decode(codes[0])

    assert_pcm_equal(run(go()), want[0])
    with pytest.raises(ValueError):
        client.connect(server.ws, n_q=0)
    with pytest.raises(ValueError):
        client.connect(server.ws, pcm="u8")
    with pytest.raises(ValueError):
        client.connect(server.ws, n_q=8, latents=True)
    with pytest.raises(ValueError):
        client.connect("tcp://127.0.0.1:1")


def test_server_side_errors_raise_chorus_error(server: Server) -> None:
    async def out_of_range() -> None:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.send(np.full((N_Q, 2), 4000), validate=False)
            await stream.recv()

    with pytest.raises(client.ChorusError) as err:
        run(out_of_range())
    assert err.value.code == "code_out_of_range"
    assert "4000" in err.value.message
    assert err.value.close_code == 1008

    async def wrong_size() -> None:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.send(np.ones((3, 1), dtype=np.int64), validate=False)
            await stream.recv()

    with pytest.raises(client.ChorusError) as err:
        run(wrong_size())
    assert err.value.code == "bad_frame_size"

    async def too_many_codebooks() -> None:
        async with client.connect(server.ws, n_q=33):
            pass

    with pytest.raises(client.ChorusError) as err:
        run(too_many_codebooks())
    assert err.value.code == "bad_open"
    assert err.value.close_code == 1008


def test_busy_when_every_slot_is_taken(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, _ = refs

    async def go() -> client.ChorusError:
        streams = [await client.connect(server.ws, n_q=N_Q) for _ in range(8)]
        try:
            with pytest.raises(client.BusyError) as err:
                await client.connect(server.ws, n_q=N_Q)
            # A slot freed by one stream is usable again at once.
            await streams[0].abort()
            async with client.connect(server.ws, n_q=N_Q) as stream:
                assert (await stream.decode(codes[0][:, :2])).shape == (2 * FRAME,)
            return err.value
        finally:
            for stream in streams:
                await stream.abort()

    busy = run(go())
    assert busy.code == "busy"
    assert busy.close_code == 1013


def test_latents_stream(server: Server) -> None:
    latents = np.random.default_rng(5).standard_normal((512, 6)).astype(np.float32)

    async def decode(data: np.ndarray) -> np.ndarray:
        async with client.connect(server.ws, latents=True) as stream:
            assert stream.latents and stream.n_q is None
            assert stream.latent_dim == data.shape[0]
            return await stream.decode(data)

    async def go() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return await asyncio.gather(decode(latents), decode(latents), decode(latents * 0.5))

    a, b, c = run(go())
    assert a.shape == (6 * FRAME,)
    assert np.array_equal(a, b)
    assert float(np.abs(a - c).max()) > 1e-3

    bad = latents[:, :1].copy()
    bad[3] = np.nan

    async def nan(validate: bool) -> None:
        async with client.connect(server.ws, latents=True) as stream:
            await stream.send(bad, validate=validate)
            await stream.recv()

    with pytest.raises(ValueError, match="finite"):
        run(nan(True))
    with pytest.raises(client.ChorusError) as err:
        run(nan(False))
    assert err.value.code == "bad_latent"


def test_drain_closes_streams_with_draining_error() -> None:
    srv = Server()
    try:
        codes = np.random.default_rng(9).integers(0, 2048, size=(N_Q, 4))

        async def no_music() -> None:
            async with client.music(srv.ws, prompt_ids=PROMPT, seconds=1):
                pass

        # A server without --music-model refuses the upgrade with a JSON 404.
        with pytest.raises(client.ChorusError) as refused:
            run(no_music())
        assert refused.value.code == "not_enabled"
        assert refused.value.status == 404

        async def go() -> Tuple[np.ndarray, client.ChorusError, Dict[str, Any]]:
            async with client.connect(srv.ws, n_q=N_Q) as stream:
                pcm = await stream.decode(codes)
                srv.proc.send_signal(signal.SIGTERM)
                with pytest.raises(client.DrainingError) as err:
                    await stream.recv(timeout=10)
                return pcm, err.value, {"received": stream.frames_received}

        pcm, err, info = run(go())
        assert pcm.shape == (4 * FRAME,)
        assert err.code == "draining"
        assert err.close_code == 1001
        assert info["received"] == 4
        assert srv.proc.wait(timeout=30) == 0
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------
# HTTP decode, health, metrics


def test_http_decode_equals_stream_and_reference(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, want = refs

    async def go() -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        async with client.connect(server.ws, n_q=N_Q) as stream:
            streamed = await stream.decode(codes[5])
        whole = await client.decode_http(server.base, codes[5])
        wav = await client.decode_http(server.base, codes[5][None].astype(np.int16), pcm="s16")
        return streamed, whole, wav

    streamed, whole, wav = run(go())
    assert np.array_equal(whole, streamed)
    assert_pcm_equal(whole, want[5])
    assert float(np.abs(wav - s16(want[5])).max()) <= 1.0 / 32767 + 1e-7

    async def out_of_range() -> None:
        await client.decode_http(server.base, np.full((N_Q, 2), 5000))

    with pytest.raises(client.ChorusError) as err:
        run(out_of_range())
    assert err.value.code == "code_out_of_range"
    assert err.value.status == 400
    with pytest.raises(ValueError):
        run(client.decode_http(server.base, -np.ones((N_Q, 2), dtype=np.int64)))


def test_health_and_metrics(server: Server, refs: Tuple[Any, Any]) -> None:
    codes, _ = refs

    async def go() -> Tuple[Dict[str, Any], str, str]:
        before = await client.metrics(server.base)
        async with client.connect(server.ws, n_q=N_Q) as stream:
            await stream.decode(codes[0][:, :3])
            status = await client.health(server.base)
        after = await client.metrics(server.base)
        return status, before, after

    status, before, after = run(go())
    assert status["status"] == "ok"
    assert status["protocol_version"] == client.PROTOCOL_VERSION
    assert status["max_streams"] == 8
    assert status["live_streams"] >= 1
    assert status["free_slots"] == 8 - status["live_streams"]
    assert (
        metric(after, "chorus_frames_decoded_total")
        >= metric(before, "chorus_frames_decoded_total") + 3
    )
    assert metric(after, "chorus_music_song_slots") == 2


def metric(text: str, name: str) -> float:
    """The metric summed over its series (the decoder's carry a `device` label)."""
    values = re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.MULTILINE)
    assert values, f"{name} not in /metrics"
    return sum(float(v) for v in values)


# ---------------------------------------------------------------------------------------------
# Music


def test_music_ws_frames_equal_http_song(server: Server) -> None:
    request: Dict[str, Any] = dict(
        prompt_ids=PROMPT, seconds=1, max_frames=6, seed=7, allow_end=False, hiddens=True
    )

    async def go() -> Tuple[List[client.MusicFrame], client.MusicResult, client.MusicResult]:
        frames = [frame async for frame in client.music(server.ws, **request)]
        whole = await client.music_http(server.base, **request)
        other = await client.music_http(server.base, **dict(request, seed=8, hiddens=False))
        return frames, whole, other

    frames, whole, other = run(go())
    assert [f.index for f in frames] == list(range(6))
    codes = np.stack([f.codes for f in frames])
    assert codes.shape == (6, client.MUSIC_LEVELS)
    assert ((codes[:, 0] >= 0) & (codes[:, 0] < 16384)).all()
    assert ((codes[:, 1:] >= 0) & (codes[:, 1:] < 1024)).all()
    hiddens = np.stack([f.hiddens for f in frames])
    assert hiddens.shape == (6, client.MUSIC_LEVELS, 256)
    assert np.isfinite(hiddens).all()
    assert whole.reason == "max_frames"
    assert whole.prompt_tokens == len(PROMPT)
    assert whole.metadata["seed"] == "7"
    assert np.array_equal(whole.codes, codes)
    assert whole.hiddens is not None and np.array_equal(whole.hiddens, hiddens)
    # Another seed gives another song, so the equality above is not vacuous.
    assert other.hiddens is None
    assert not np.array_equal(other.codes, codes)


def test_music_cancel_ends_the_song_early(server: Server) -> None:
    async def go() -> Tuple[client.MusicResult, int]:
        async with client.music(server.ws, prompt_ids=PROMPT, seconds=9, allow_end=False) as song:
            first = await song.recv(timeout=10)
            assert first.index == 0 and first.hiddens is None
            await song.cancel()
            rest = await song.collect()
            return rest, song.max_frames

    rest, max_frames = run(go())
    assert max_frames == 9 * client.MUSIC_FRAME_RATE
    assert rest.reason == "cancelled"
    assert rest.frames + 1 < max_frames


def test_music_errors(server: Server) -> None:
    with pytest.raises(ValueError):
        client.music(server.ws, prompt_ids=PROMPT, seconds=0)
    with pytest.raises(ValueError):
        client.music(server.ws, prompt_ids=[1, 2], seconds=1)
    with pytest.raises(ValueError):
        client.music(server.ws, caption="synth pop", seconds=1)
    with pytest.raises(ValueError):
        client.music(server.ws, prompt_ids=PROMPT, seconds=1, sampling="top_p")

    async def no_tokenizer() -> None:
        async with client.music(server.ws, caption="synth pop", lyrics="la la", seconds=1):
            pass

    with pytest.raises(client.ChorusError) as err:
        run(no_tokenizer())
    assert err.value.code == "no_tokenizer"
    assert err.value.close_code == 1008

    async def too_long() -> None:
        # 360 s of frames do not fit the server's 256-position context.
        await client.music_http(server.base, prompt_ids=PROMPT, seconds=360)

    with pytest.raises(client.ChorusError) as err:
        run(too_long())
    assert err.value.code == "bad_request"
    assert err.value.status == 400
