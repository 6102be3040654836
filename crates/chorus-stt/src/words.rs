//! Words and their times from the text stream (`KYUTAI_STT.md` §3.3, the server's rule): the
//! stream is mostly PAD; EPAD opens a word, its pieces follow, and the next PAD or EPAD closes
//! it. A word starts at the time of the EPAD before it and ends at the next EPAD; times are
//! `(s - delay) / 12.5` seconds for the token of step `s` (1-based), relative to the stream start
//! including any silence the caller put before the speech. Tokens of the first `delay` steps are
//! the model warming up and are ignored.

use crate::config::{SttConfig, FRAME_RATE};

/// What the assembler reports, in stream order.
#[derive(Clone, Debug, PartialEq)]
pub enum WordEvent {
    /// A finished word: its pieces (decode them with the tokenizer) and start time.
    Word { tokens: Vec<u32>, start: f32 },
    /// The end of the previous word.
    EndWord { stop: f32 },
}

/// One stream's word state: the piece buffer, whether the last word still awaits its end, the
/// last EPAD time.
#[derive(Clone, Debug)]
pub struct WordAssembler {
    delay: usize,
    pad: u32,
    epad: u32,
    steps: usize,
    buf: Vec<u32>,
    unended: bool,
    last_stop: f32,
}

impl WordAssembler {
    pub fn new(c: &SttConfig) -> Self {
        Self {
            delay: c.text_delay_frames,
            pad: c.ids.pad,
            epad: c.ids.epad,
            steps: 0,
            buf: Vec::new(),
            unended: false,
            last_stop: 0.0,
        }
    }

    /// The time of step `s` (1-based) in seconds.
    fn time(&self, s: usize) -> f32 {
        s.saturating_sub(self.delay) as f32 / FRAME_RATE
    }

    /// Takes the next step's token.
    pub fn push(&mut self, token: u32, out: &mut impl FnMut(WordEvent)) {
        self.steps += 1;
        if self.steps < self.delay {
            return;
        }
        if token != self.pad && token != self.epad {
            self.buf.push(token);
            return;
        }
        self.close(out);
        if token == self.epad {
            let t = self.time(self.steps);
            if self.unended {
                out(WordEvent::EndWord { stop: t });
                self.unended = false;
            }
            self.last_stop = t;
        }
    }

    fn close(&mut self, out: &mut impl FnMut(WordEvent)) {
        if !self.buf.is_empty() {
            out(WordEvent::Word {
                tokens: std::mem::take(&mut self.buf),
                start: self.last_stop,
            });
            self.unended = true;
        }
    }

    /// The end of the stream: a word still being spelled is closed, and an unended word ends at
    /// the time of the last step.
    pub fn finish(&mut self, out: &mut impl FnMut(WordEvent)) {
        self.close(out);
        if self.unended {
            out(WordEvent::EndWord {
                stop: self.time(self.steps),
            });
            self.unended = false;
        }
    }

    /// Steps taken.
    pub fn steps(&self) -> usize {
        self.steps
    }
}
