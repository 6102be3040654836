//! chorus-engine (in progress).
