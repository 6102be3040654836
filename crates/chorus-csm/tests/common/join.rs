//! Utterances joining a stage at given frames, on any backend: the runner that the chunked-prefill
//! tests (`tests/join.rs`, `tests/cuda.rs`) compare whole and chunked prefill with.

use chorus_core::LmOps;
use chorus_csm::prompt::PromptFrame;
use chorus_csm::{
    CsmConfig, CsmModel, EndReason, TtsOptions, TtsStage, UtteranceEvent, UtteranceRequest,
};
use chorus_lm::Sampling;
use chorus_mimi::checkpoint::LoadedModel;

/// Positions per utterance of the stages these tests build.
pub const CONTEXT: usize = 64;

/// One utterance of a run: its prompt's length in frames, frames, seed, the step it joins
/// before, and the step it is cancelled before (if any).
#[derive(Clone, Copy, Debug)]
pub struct Join {
    pub len: usize,
    pub frames: usize,
    pub seed: u64,
    pub at: usize,
    pub cancel: Option<usize>,
}

impl Join {
    pub const fn new(len: usize, frames: usize, seed: u64, at: usize) -> Self {
        Self {
            len,
            frames,
            seed,
            at,
            cancel: None,
        }
    }
}

/// Everything an utterance produced: its codes, the bits of its audio, and how it ended.
#[derive(Clone, Default, Debug)]
pub struct Output {
    pub codes: Vec<Vec<u32>>,
    pub pcm: Vec<u32>,
    pub end: Option<(EndReason, usize)>,
}

/// Asserts that `got` is `want`: codes and end, then the audio's bits (not printed: too long).
pub fn assert_same(got: &Output, want: &Output, what: &str) {
    assert_eq!(got.codes, want.codes, "{what}: codes");
    assert_eq!(got.end, want.end, "{what}: end");
    assert!(got.pcm == want.pcm, "{what}: audio");
}

/// A prompt of `len` frames (at least 3): text, an audio context frame wherever `i % 4 == 2`
/// (so chunks start and end on both kinds), and the text's closing frame.
pub fn prompt(c: &CsmConfig, len: usize, seed: u64) -> Vec<PromptFrame> {
    let books = c.num_codebooks as u64;
    let limit = c.code_limit() as u64 - 1;
    let text = c.text_vocab_size as u64;
    (0..len as u64)
        .map(|i| {
            let x = seed * 31 + i * 7;
            if i % 4 == 2 {
                PromptFrame::Audio((0..books).map(|l| ((x + l) % limit + 1) as u32).collect())
            } else {
                PromptFrame::Text((x % text) as u32)
            }
        })
        .collect()
}

/// Runs `joins` on a stage over `be` that prefills `chunk` prompt frames per frame (0: whole
/// prompts) and decodes audio with `mimi`; returns each utterance's output. `check` sees the
/// stage after every admission.
pub fn run_joins<B: LmOps>(
    be: B,
    (m, mimi): (&CsmModel, &LoadedModel),
    chunk: usize,
    joins: &[Join],
    check: &mut dyn FnMut(&TtsStage<B>, usize),
) -> Vec<Output> {
    let c = &m.config;
    let mut opts = TtsOptions::for_utterances(joins.len(), CONTEXT).unwrap();
    opts.prefill_chunk = chunk;
    let mut st = TtsStage::new(be, m, Some(mimi), opts).unwrap();
    st.warmup().unwrap();
    let mut outs = vec![Output::default(); joins.len()];
    let mut ids = vec![None; joins.len()];
    let last = joins.iter().map(|j| j.at.max(j.cancel.unwrap_or(0))).max();
    for f in 0..200 {
        for (i, j) in joins.iter().enumerate() {
            if j.cancel == Some(f) {
                st.cancel(ids[i].unwrap()).unwrap();
            }
            if j.at == f {
                let req = UtteranceRequest {
                    prompt: prompt(c, j.len, j.seed),
                    max_frames: j.frames,
                    sampling: Sampling::Seeded(j.seed),
                    draws: None,
                    forced: None,
                };
                ids[i] = Some(st.add(req).unwrap());
                check(&st, i);
            }
        }
        st.step(&mut |e| {
            let (UtteranceEvent::Frame { utterance, .. } | UtteranceEvent::Ended { utterance, .. }) =
                e;
            let i = ids.iter().position(|&x| x == Some(utterance)).unwrap();
            let o = &mut outs[i];
            match e {
                UtteranceEvent::Frame {
                    index, codes, pcm, ..
                } => {
                    assert_eq!(o.codes.len(), index, "frames arrive in order");
                    o.codes.push(codes.to_vec());
                    o.pcm
                        .extend(pcm.expect("the stage decodes").iter().map(|x| x.to_bits()));
                }
                UtteranceEvent::Ended { reason, frames, .. } => o.end = Some((reason, frames)),
            }
        })
        .unwrap();
        if Some(f) >= last && st.active() == 0 {
            break;
        }
    }
    assert_eq!(st.active(), 0);
    assert_eq!(st.kv_blocks().0, 0, "every block returns");
    outs
}
