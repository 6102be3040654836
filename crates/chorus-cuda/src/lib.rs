//! chorus-cuda (in progress).
