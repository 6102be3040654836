//! The streaming encoder and decoder do not touch the heap once their buffers are warm.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use chorus_audio::{OpusFrameDecoder, OpusFrameEncoder, FRAME_SAMPLES};

/// Counts allocations made by the thread that set `COUNTING`.
struct CountingAlloc;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised, so reading it inside the allocator never allocates.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: every call is forwarded unchanged to the system allocator; the counter has no effect
// on the memory handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

#[test]
fn warm_encode_and_decode_do_not_allocate() {
    let mut enc = OpusFrameEncoder::new(32_000).unwrap();
    let mut dec = OpusFrameDecoder::new().unwrap();
    let frames: Vec<Vec<f32>> = (0..20)
        .map(|k| {
            (0..FRAME_SAMPLES)
                .map(|i| 0.3 * ((i + k * FRAME_SAMPLES) as f32 * 0.05).sin())
                .collect()
        })
        .collect();
    let mut packet = Vec::new();
    let mut pcm = Vec::new();
    // Warm up: the output buffers grow to their working size.
    enc.encode(&frames[0], &mut packet).unwrap();
    dec.decode(&packet, &mut pcm).unwrap();

    COUNTING.with(|c| c.set(true));
    for frame in &frames[1..] {
        packet.clear();
        enc.encode(frame, &mut packet).unwrap();
        pcm.clear();
        dec.decode(&packet, &mut pcm).unwrap();
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(pcm.len(), FRAME_SAMPLES);
    assert_eq!(
        ALLOCATIONS.load(Ordering::Relaxed),
        0,
        "heap allocations in 19 warm frames"
    );
}
