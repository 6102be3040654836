//! Text segments to token ids: the Llama 3 `tokenizer.json` (through the `tokenizers` crate), or,
//! for random-weight models only, a byte-level stand-in that needs no file.
//!
//! A segment is `"[{speaker}]{text}"` wrapped as `BOS ... text EOS` (`CSM.md` §3.1). The text is
//! encoded without the tokenizer's own special tokens and wrapped here, which equals both
//! Sesame's and HF's processor output (the added tokens split off before the rest is encoded).

use std::path::Path;

use chorus_core::{Error, Result};
use tokenizers::Tokenizer;

use crate::config::CsmConfig;

const OP: &str = "csm tokenizer";
/// The Llama 3 names of the ids every segment carries.
const BOS_TOKEN: &str = "<|begin_of_text|>";
const EOS_TOKEN: &str = "<|end_of_text|>";
/// The first id the byte stand-in uses (ids below it are often specials in small vocabularies).
pub const BYTE_FALLBACK_FIRST: u32 = 4;

#[derive(Debug)]
enum Kind {
    Llama3(Box<Tokenizer>),
    /// Byte `b` is id `BYTE_FALLBACK_FIRST + b % span`.
    Bytes {
        span: u32,
    },
}

/// Encodes segments for one model; knows its BOS/EOS ids and text vocabulary.
#[derive(Debug)]
pub struct CsmTokenizer {
    kind: Kind,
    bos: u32,
    eos: u32,
    vocab: usize,
    name: String,
}

impl CsmTokenizer {
    /// Loads a `tokenizer.json` and checks that `<|begin_of_text|>` and `<|end_of_text|>` are
    /// single tokens with `config`'s ids.
    pub fn from_file(path: &Path, config: &CsmConfig) -> Result<Self> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::io(OP, name.clone(), e))?;
        let t = Tokenizer::from_bytes(bytes).map_err(|e| Error::Format {
            op: OP,
            path: name.clone(),
            reason: e.to_string(),
        })?;
        Self::from_tokenizer(t, &name, config)
    }

    /// Wraps a tokenizer (`name` names it in errors); checks as [`CsmTokenizer::from_file`].
    pub fn from_tokenizer(mut t: Tokenizer, name: &str, config: &CsmConfig) -> Result<Self> {
        let malformed = |reason: String| Error::Format {
            op: OP,
            path: name.to_string(),
            reason,
        };
        for (token, id) in [
            (BOS_TOKEN, config.ids.bos),
            (EOS_TOKEN, config.ids.text_eos),
        ] {
            match t.token_to_id(token) {
                Some(found) if found == id => {}
                Some(found) => {
                    return Err(malformed(format!(
                        "{token} has id {found}, the config expects {id}"
                    )))
                }
                None => return Err(malformed(format!("{token} is missing (expected id {id})"))),
            }
        }
        // transformers disables the file's truncation and padding for `tokenizer(text)`.
        t.with_truncation(None)
            .map_err(|e| malformed(e.to_string()))?;
        t.with_padding(None);
        Ok(Self {
            kind: Kind::Llama3(Box::new(t)),
            bos: config.ids.bos,
            eos: config.ids.text_eos,
            vocab: config.text_vocab_size,
            name: name.to_string(),
        })
    }

    /// The byte-level stand-in, FOR RANDOM-WEIGHT MODELS ONLY (their speech is noise anyway): text
    /// byte `b` becomes id `BYTE_FALLBACK_FIRST + b % span`, `span` the ids below the smallest
    /// special id (and the vocabulary), so no byte lands on a special id. Deterministic, offline.
    pub fn byte_fallback(config: &CsmConfig) -> Result<Self> {
        let ids = &config.ids;
        let limit = [
            ids.bos,
            ids.text_eos,
            ids.audio_token,
            ids.audio_eos,
            ids.pad,
        ]
        .into_iter()
        .filter(|&id| id >= BYTE_FALLBACK_FIRST)
        .chain([u32::try_from(config.text_vocab_size).unwrap_or(u32::MAX)])
        .min()
        .unwrap_or(u32::MAX);
        let span = limit.saturating_sub(BYTE_FALLBACK_FIRST);
        if span == 0 {
            return Err(Error::config(
                OP,
                format!("the text vocabulary leaves no ids for the byte stand-in (limit {limit})"),
            ));
        }
        Ok(Self {
            kind: Kind::Bytes { span },
            bos: ids.bos,
            eos: ids.text_eos,
            vocab: config.text_vocab_size,
            name: "byte stand-in tokenizer (random weights only)".into(),
        })
    }

    /// True for the byte stand-in.
    pub fn is_byte_fallback(&self) -> bool {
        matches!(self.kind, Kind::Bytes { .. })
    }

    /// What this tokenizer is, for logs.
    pub fn describe(&self) -> &str {
        &self.name
    }

    /// The ids of `text` alone, no special tokens.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>> {
        let ids = match &self.kind {
            Kind::Bytes { span } => text
                .bytes()
                .map(|b| BYTE_FALLBACK_FIRST + u32::from(b) % span)
                .collect(),
            Kind::Llama3(t) => t
                .encode(text, false)
                .map_err(|e| Error::config(OP, format!("{}: encoding failed: {e}", self.name)))?
                .get_ids()
                .to_vec(),
        };
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= self.vocab) {
            return Err(Error::input(
                OP,
                format!(
                    "{} produced id {bad}, outside the model's text vocabulary of {}",
                    self.name, self.vocab
                ),
            ));
        }
        Ok(ids)
    }

    /// One text segment: `BOS, ids of "[{speaker}]{text}", EOS`.
    pub fn encode_segment(&self, speaker: u32, text: &str) -> Result<Vec<u32>> {
        let mut ids = vec![self.bos];
        ids.extend(self.encode_plain(&format!("[{speaker}]{text}"))?);
        ids.push(self.eos);
        Ok(ids)
    }
}
