//! Constants shared between crates.

/// Sample rate of Mimi's PCM output, in Hz.
pub const SAMPLE_RATE: u32 = 24_000;
/// Samples in one decoded frame (80 ms at 24 kHz).
pub const FRAME_SAMPLES: usize = 1920;
/// Frames per second (12.5 Hz): one frame every 80 ms.
pub const FRAME_MS: u64 = 80;
/// The most codebooks a Mimi frame can carry.
pub const MAX_CODEBOOKS: usize = 32;
/// Code value that marks "no code for this codebook" in the codes staging buffer; a stream
/// decoding with n_q < MAX_CODEBOOKS pads its row with it, and a latent stream fills its row.
pub const NO_CODE: i32 = -1;
/// Entry of a list of rows to reset that names no row ([`crate::ResetRowsArgs`]): a step's list
/// holds its admitted slots, then `NO_ROW` to the bucket's size.
pub const NO_ROW: i32 = -1;
/// Capacity of each per-slot KV ring: a power of two above the 250-token window plus the 2 tokens
/// a frame writes, so that writing a frame never overwrites a key its own queries still need.
pub const KV_RING: usize = 256;
/// Default batch buckets: a step of B streams is padded with the dummy row to the next bucket.
/// Above 256 they step by 128 rows, not by doubling: a loaded server's batches sit there, and
/// padding 385 rows to 512 cost a quarter of the GPU (H200, 12,000 streams: p99 28.0 ms with
/// powers of two, 17.5 ms with these; docs/PERFORMANCE.md).
pub const DEFAULT_BUCKETS: &[usize] = &[
    1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1024,
];
/// Past the last of [`DEFAULT_BUCKETS`], a stage's buckets step by this many rows up to its size
/// (`Buckets::up_to`): at most a fifth of a step past 1,024 rows is padding.
pub const LARGE_BUCKET_STEP: usize = 256;
/// Frames per slot of one whole-file decode step (3.84 s of each sequence): time runs in parallel
/// inside the step (one graph per bucket), the attention over 96 tokens, instead of one step per
/// frame; a sequence's last chunk is padded past its end (the decoder is causal).
pub const WHOLE_FILE_DECODE_CHUNK: usize = 48;
/// [`WHOLE_FILE_DECODE_CHUNK`] on the CPU: its long convolutions run in cache-sized tiles whatever
/// the chunk, so a longer chunk only spreads the weights of the transformer and the first stage
/// over more frames; 32 measured ahead of 16 on the 2-core development machine (docs/PERFORMANCE.md)
/// and pads a 10 s file's last chunk by 3 frames (48 would pad 19).
pub const CPU_WHOLE_FILE_DECODE_CHUNK: usize = 32;
/// Frames per slot of one whole-file encode step (3.84 s of each file): every convolution runs
/// over the chunk at once and the attention over its 96 tokens. At 64 files a step's f32
/// activations stay near 6 GB, which bounds the chunk (the CUDA attention takes a step's queries
/// span by span, so it does not).
pub const WHOLE_FILE_ENCODE_CHUNK: usize = 48;
/// [`WHOLE_FILE_ENCODE_CHUNK`] on the CPU: 32 frames measured ahead of 48 there (a 10 s file's
/// last chunk pads 3 frames instead of 19) and keeps a batch's f32 activations half as large.
pub const CPU_WHOLE_FILE_ENCODE_CHUNK: usize = 32;
