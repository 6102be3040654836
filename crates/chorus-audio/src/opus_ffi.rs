//! The few libopus entry points this crate calls, declared by hand from `libopus/include/opus.h`
//! (no bindgen: it would need libclang at build time). Only `opus.rs` calls into here.

use std::ffi::{c_char, c_int, c_uchar};

/// Opaque libopus encoder state (`OpusEncoder` in `opus.h`).
#[repr(C)]
pub(crate) struct OpusEncoder {
    _private: [u8; 0],
}

/// Opaque libopus decoder state (`OpusDecoder` in `opus.h`).
#[repr(C)]
pub(crate) struct OpusDecoder {
    _private: [u8; 0],
}

/// `OPUS_OK`: success.
pub(crate) const OPUS_OK: c_int = 0;
/// `OPUS_APPLICATION_VOIP`.
pub(crate) const OPUS_APPLICATION_VOIP: c_int = 2048;
/// `OPUS_APPLICATION_AUDIO`.
pub(crate) const OPUS_APPLICATION_AUDIO: c_int = 2049;
/// `OPUS_APPLICATION_RESTRICTED_LOWDELAY`.
pub(crate) const OPUS_APPLICATION_RESTRICTED_LOWDELAY: c_int = 2051;
/// `OPUS_SET_BITRATE_REQUEST` (argument: `opus_int32` bits per second).
pub(crate) const OPUS_SET_BITRATE_REQUEST: c_int = 4002;
/// `OPUS_SET_VBR_REQUEST` (argument: `opus_int32` 0 or 1).
pub(crate) const OPUS_SET_VBR_REQUEST: c_int = 4006;
/// `OPUS_SET_COMPLEXITY_REQUEST` (argument: `opus_int32` 0..=10).
pub(crate) const OPUS_SET_COMPLEXITY_REQUEST: c_int = 4010;
/// `OPUS_GET_LOOKAHEAD_REQUEST` (argument: `opus_int32 *`).
pub(crate) const OPUS_GET_LOOKAHEAD_REQUEST: c_int = 4027;
/// `OPUS_RESET_STATE` (no argument).
pub(crate) const OPUS_RESET_STATE: c_int = 4028;

extern "C" {
    pub(crate) fn opus_encoder_create(
        fs: i32,
        channels: c_int,
        application: c_int,
        error: *mut c_int,
    ) -> *mut OpusEncoder;
    pub(crate) fn opus_encode_float(
        st: *mut OpusEncoder,
        pcm: *const f32,
        frame_size: c_int,
        data: *mut c_uchar,
        max_data_bytes: i32,
    ) -> i32;
    pub(crate) fn opus_encoder_ctl(st: *mut OpusEncoder, request: c_int, ...) -> c_int;
    pub(crate) fn opus_encoder_destroy(st: *mut OpusEncoder);

    pub(crate) fn opus_decoder_create(
        fs: i32,
        channels: c_int,
        error: *mut c_int,
    ) -> *mut OpusDecoder;
    pub(crate) fn opus_decode_float(
        st: *mut OpusDecoder,
        data: *const c_uchar,
        len: i32,
        pcm: *mut f32,
        frame_size: c_int,
        decode_fec: c_int,
    ) -> c_int;
    pub(crate) fn opus_decoder_ctl(st: *mut OpusDecoder, request: c_int, ...) -> c_int;
    pub(crate) fn opus_decoder_destroy(st: *mut OpusDecoder);

    pub(crate) fn opus_packet_get_nb_samples(packet: *const c_uchar, len: i32, fs: i32) -> c_int;
    pub(crate) fn opus_strerror(error: c_int) -> *const c_char;
    pub(crate) fn opus_get_version_string() -> *const c_char;
}
