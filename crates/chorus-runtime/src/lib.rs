//! Opens models on a device, shared by the command line and the Python package.
//!
//! [`device`] resolves `auto`/`cpu`/`cuda` and builds a warmed-up Mimi slot decoder behind
//! [`chorus_core::FrameDecoder`] (on a chosen CUDA device when asked), [`encoder`] the slot
//! encoder behind [`chorus_core::FrameEncoder`]; [`devices`] parses the server's `--devices`
//! list against the visible CUDA devices; [`music`] builds the music semantic stage and [`tts`]
//! the CSM speech stage on either backend behind one enum each; [`bulk`] runs many files through
//! one encoder or decoder (reader threads, one slot per file, the steps in between). Each builder
//! captures every CUDA graph before it returns, so the first frame a caller decodes costs what
//! every later one does.

pub mod bulk;
pub mod device;
pub mod devices;
pub mod encoder;
pub mod music;
pub mod stt;
pub mod tts;

pub use chorus_core::{Error, Result};
pub use device::{
    cuda_options, open_decoder, open_decoder_on, resolve, whole_file_decode_chunk,
    whole_file_encode_chunk, DecoderSpec, DeviceKind,
};
pub use devices::{visible_cuda_devices, DeviceList};
pub use encoder::{open_encoder, EncoderSpec};
pub use music::{AnyStage, StageSpec};
pub use stt::{AnyStt, SttSpec};
pub use tts::{AnyTts, TtsSpec};
