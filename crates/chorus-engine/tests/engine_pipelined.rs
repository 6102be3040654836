//! Scheduler behaviour with a pipelined decoder: every case of `engine.rs` again, with one step
//! queued on the decoder while the engine picks and launches the next.

const PIPELINED: bool = true;
include!("cases/engine_cases.rs");
