//! chorus-server (in progress).
