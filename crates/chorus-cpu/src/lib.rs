//! chorus-cpu (in progress).
