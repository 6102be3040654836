//! The text tokenizer: Kyutai's SentencePiece `.model` (4000 or 8000 pieces), read by the
//! `sentencepiece-model` parser; decoding is SentencePiece's own rule (`decode_pieces`): pieces
//! concatenated, `<0xNN>` byte pieces as bytes, control pieces as nothing, `▁` as a space, the
//! leading space of the text dropped. The model only ever emits ids, so no encoder is needed.

use std::path::Path;

use chorus_core::{Error, Result};
use sentencepiece_model::{SentencePieceModel, Type};

use crate::config::SttConfig;

const OP: &str = "SttTokenizer";
/// SentencePiece's word-boundary mark.
const SPACE_MARK: char = '\u{2581}';
/// What SentencePiece decodes an unknown piece to.
const UNKNOWN_SURFACE: &str = " \u{2047} ";

/// How one id decodes.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Text, `▁` already a space.
    Text(String),
    Byte(u8),
    /// Control and unused pieces decode to nothing.
    Nothing,
    Unknown,
}

/// Id to text.
#[derive(Clone, Debug)]
pub struct SttTokenizer {
    pieces: Vec<Piece>,
    source: String,
}

impl SttTokenizer {
    /// Reads a SentencePiece `.model` and checks it has the config's `text_vocab` pieces.
    pub fn from_file(path: &Path, c: &SttConfig) -> Result<Self> {
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::io(OP, &shown, e))?;
        Self::from_bytes(&bytes, &shown, c)
    }

    /// Parses a SentencePiece model held in memory; `what` names it in errors.
    pub fn from_bytes(bytes: &[u8], what: &str, c: &SttConfig) -> Result<Self> {
        let model = SentencePieceModel::from_slice(bytes).map_err(|e| Error::Format {
            op: OP,
            path: what.into(),
            reason: format!("not a SentencePiece model: {e}"),
        })?;
        let pieces: Vec<Piece> = model
            .pieces()
            .iter()
            .map(|p| match p.r#type() {
                Type::Normal | Type::UserDefined => Piece::Text(p.piece().replace(SPACE_MARK, " ")),
                Type::Byte => byte_piece(p.piece()).map_or(Piece::Unknown, Piece::Byte),
                Type::Unknown => Piece::Unknown,
                Type::Control | Type::Unused => Piece::Nothing,
            })
            .collect();
        if pieces.len() != c.text_vocab {
            return Err(Error::Format {
                op: OP,
                path: what.into(),
                reason: format!(
                    "{} pieces, but the model's text head scores {} (wrong tokenizer for this \
                     checkpoint?)",
                    pieces.len(),
                    c.text_vocab
                ),
            });
        }
        Ok(Self {
            pieces,
            source: what.into(),
        })
    }

    /// A stand-in for random weights: id `i` is the word `t{i}`, the first four ids control.
    pub fn synthetic(c: &SttConfig) -> Self {
        let pieces = (0..c.text_vocab)
            .map(|i| {
                if i <= c.ids.pad.max(c.ids.epad) as usize {
                    Piece::Nothing
                } else {
                    Piece::Text(format!(" t{i}"))
                }
            })
            .collect();
        Self {
            pieces,
            source: "synthetic pieces (random weights)".into(),
        }
    }

    /// Pieces of the vocabulary.
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Where the pieces came from, for logs.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The text of `ids` (SentencePiece's decode; module doc). An id past the vocabulary is an
    /// error naming it.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let mut bytes = Vec::new();
        for &id in ids {
            match self.pieces.get(id as usize) {
                Some(Piece::Text(t)) => bytes.extend_from_slice(t.as_bytes()),
                Some(Piece::Byte(b)) => bytes.push(*b),
                Some(Piece::Unknown) => bytes.extend_from_slice(UNKNOWN_SURFACE.as_bytes()),
                Some(Piece::Nothing) => {}
                None => {
                    return Err(Error::input(
                        "SttTokenizer::decode",
                        format!("token {id} is outside the {} pieces", self.pieces.len()),
                    ))
                }
            }
        }
        let text = String::from_utf8_lossy(&bytes);
        Ok(text.strip_prefix(' ').unwrap_or(&text).to_string())
    }
}

/// The byte of a `<0xNN>` piece.
fn byte_piece(p: &str) -> Option<u8> {
    let hex = p.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}
