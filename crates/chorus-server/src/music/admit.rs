//! Admission on the engine thread: a song starts at once or is refused at once (`busy` when no
//! slot or KV blocks are free); nothing waits in line for a slot.

use chorus_core::LmOps;
use chorus_music::EndReason;

use super::error::{MusicError, MusicErrorCode};
use super::job::{MusicEvent, Outcome, Started};
use super::request::SongSpec;
use super::worker::{song_blocks, Running, StartJob, Worker};
use crate::stage::error::admission_error;
use crate::stage::job::CancelRequest;

impl<B: LmOps> Worker<B> {
    /// Admits a song or refuses it at once (nothing waits for a slot).
    pub(super) fn admit_song(&mut self, job: StartJob) {
        let StartJob {
            spec,
            events,
            shared,
            seat,
        } = job;
        if events.is_closed() || shared.cancel_request() != CancelRequest::None {
            shared.set_outcome(Outcome::Ended {
                reason: EndReason::Cancelled,
                frames: 0,
            });
            return;
        }
        if let Err(e) = self.fits(&spec) {
            shared.set_outcome(Outcome::Failed(e));
            return;
        }
        let (max_frames, prompt_tokens, hiddens) =
            (spec.request.max_frames, spec.prompt_tokens(), spec.hiddens);
        match self.stage.add_song(spec.request) {
            Ok(id) => {
                // A fresh channel has room, so this fails only when the client is gone; the
                // next sweep then cancels the song.
                let _ = events.try_send(MusicEvent::Started(Started {
                    song: id,
                    max_frames,
                    prompt_tokens,
                }));
                let running = Running {
                    events,
                    shared,
                    hiddens,
                    sent: 0,
                    _seat: seat,
                };
                self.jobs.insert(id, running);
                // Gauges first, so that a started song is never seen as not active.
                self.publish_gauges();
                self.metrics.song_started();
            }
            Err(e) => shared.set_outcome(Outcome::Failed(admission_error(&e))),
        }
    }

    /// Refuses, as `busy`, a song for which no slot or KV blocks are free now.
    fn fits(&self, spec: &SongSpec) -> Result<(), MusicError> {
        if self.jobs.len() >= self.info.max_songs {
            return Err(MusicError::new(
                MusicErrorCode::Busy,
                format!("busy: all {} song slots are in use", self.info.max_songs),
            ));
        }
        let need = song_blocks(spec, self.info.block_size);
        let (_, available, usable) = self.stage.kv_blocks();
        if need > available {
            return Err(MusicError::new(
                MusicErrorCode::Busy,
                format!(
                    "busy: the song needs {need} KV blocks and {available} of {usable} are free"
                ),
            ));
        }
        Ok(())
    }
}
