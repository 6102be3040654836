//! Scheduler behaviour with a decoder that runs one step at a time.

const PIPELINED: bool = false;
include!("cases/engine_cases.rs");
