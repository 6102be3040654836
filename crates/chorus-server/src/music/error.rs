//! `/v1/music` errors: the model endpoints' shared codes ([`crate::stage::error`]).

pub use crate::stage::error::{StageError as MusicError, StageErrorCode as MusicErrorCode};
