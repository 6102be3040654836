//! The text prompt of the semantic stage: caption cleaning, lyrics normalisation, the special-token
//! template, tokenisation and the classifier-free-guidance row.
//!
//! A port of upstream `_clean_caption`, `_normalize_lyrics` and `_tokenize` (Wan2GP
//! `models/TTS/minimax_music3/pipeline.py`; diffusers
//! `src/diffusers/modular_pipelines/minimax_music3/encoders.py`). Where the two differ we follow
//! diffusers: an empty `<||>` tag becomes "" instead of raising, and a second `^\s*\*\s+` bullet
//! pass runs after the first. Python's `\s`, `str.strip` and `str.splitlines` are reproduced
//! exactly (checked against the Python functions on 40,000 random strings).

use std::path::Path;
use std::sync::LazyLock;

use chorus_core::{Error, Result};
use regex::{Captures, Regex};
use tokenizers::Tokenizer;

/// `<|im_start|>`: the first token of every prompt.
pub const IM_START: u32 = 151_644;
/// `<|im_end|>`: closes the text part.
pub const IM_END: u32 = 151_645;
/// `<|audio_start|>`: the last prompt token; generation continues after it.
pub const AUDIO_START: u32 = 151_669;
/// `<|caption_start|>`: opens the cleaned caption.
pub const CAPTION_START: u32 = 151_671;
/// `<|caption_end|>`: closes the cleaned caption.
pub const CAPTION_END: u32 = 151_672;
/// `<|lyrics_start|>`: opens the normalised lyrics.
pub const LYRICS_START: u32 = 151_673;
/// `<|lyrics_end|>`: closes the normalised lyrics.
pub const LYRICS_END: u32 = 151_674;
/// Filler id of the unconditional (CFG) row (`_AUDIO_CFG_TOKEN_ID`).
pub const CFG_FILLER: u32 = 151_654;
/// Longest prompt accepted (pipeline.py:31).
pub const MAX_PROMPT_TOKENS: usize = 5000;

/// The special tokens a tokenizer must carry, with the ids the checkpoint was trained on.
const SPECIAL_TOKENS: [(&str, u32); 7] = [
    ("<|im_start|>", IM_START),
    ("<|im_end|>", IM_END),
    ("<|audio_start|>", AUDIO_START),
    ("<|caption_start|>", CAPTION_START),
    ("<|caption_end|>", CAPTION_END),
    ("<|lyrics_start|>", LYRICS_START),
    ("<|lyrics_end|>", LYRICS_END),
];

const OP_TEXT: &str = "music prompt";
const OP_IDS: &str = "music prompt ids";
const OP_TOKENIZER: &str = "music tokenizer";

/// Compiles one of this module's literal patterns (all exercised by the tests).
fn pattern(source: &str) -> Regex {
    Regex::new(source).expect("prompt.rs: literal regex pattern is valid")
}

// `[\s\x1c-\x1f]` is Python's `\s` (str.isspace): Unicode White_Space plus the four separators.
static SPECIAL_TAG: LazyLock<Regex> = LazyLock::new(|| pattern(r"<\|([^|]*)\|>"));
static HEADER: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"^[\s\x1c-\x1f]{0,3}#{1,6}[\s\x1c-\x1f]+"));
static BULLET: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[\s\x1c-\x1f]*[*+-][\s\x1c-\x1f]+"));
static STAR_BULLET: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[\s\x1c-\x1f]*\*[\s\x1c-\x1f]+"));
static BOLD: LazyLock<Regex> = LazyLock::new(|| pattern(r"\*\*([^*]+)\*\*"));
static RULE: LazyLock<Regex> =
    LazyLock::new(|| pattern(r"(?m)^[\s\x1c-\x1f]*[-*_]{3,}[\s\x1c-\x1f]*$"));
static BLANK_LINES: LazyLock<Regex> = LazyLock::new(|| pattern(r"\n{2,}"));
static LEADING_TAGS: LazyLock<Regex> = LazyLock::new(|| pattern(r"^[ \t]*((?:\[[^\]]+\][ \t]*)+)"));
static LYRIC_TAG: LazyLock<Regex> = LazyLock::new(|| pattern(r"\[([^\]]+)\]"));

/// Python's `str.isspace` for one character.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.splitlines()`: every Unicode line boundary, `\r\n` as one, no trailing empty line.
fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let boundary = matches!(
            c,
            '\n' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}'
        );
        if boundary {
            lines.push(&s[start..i]);
            start = i + c.len_utf8();
            if c == '\r' && chars.peek().map(|&(_, n)| n) == Some('\n') {
                chars.next();
                start += 1;
            }
        }
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// `re.sub(r"(?<!\*)\*([^*\n]+)\*(?!\*)", r"\1", line)`; the `regex` crate has no lookaround.
fn strip_single_emphasis(line: &str) -> String {
    let c: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < c.len() {
        // The lookbehind reads the original text, as Python's does.
        if c[i] == '*' && (i == 0 || c[i - 1] != '*') {
            let mut j = i + 1;
            while j < c.len() && c[j] != '*' && c[j] != '\n' {
                j += 1;
            }
            if j > i + 1 && j < c.len() && c[j] == '*' && c.get(j + 1) != Some(&'*') {
                out.extend(&c[i + 1..j]);
                i = j + 1;
                continue;
            }
        }
        out.push(c[i]);
        i += 1;
    }
    out
}

/// Upstream `_clean_caption`: `<|x y|>` becomes `x is y`, markdown headers, bullets, emphasis and
/// rules are stripped, `• ` and runs of four spaces removed, blank lines collapsed.
pub fn clean_caption(caption: &str) -> String {
    let text = SPECIAL_TAG.replace_all(caption, |caps: &Captures| {
        let inner = caps[1].trim_matches(py_space);
        // `inner.split(None, 1)`: two parts only when the stripped content holds whitespace.
        match inner.split_once(py_space) {
            Some((key, rest)) => format!("{key} is {}", rest.trim_start_matches(py_space)),
            None => inner.to_string(),
        }
    });
    let mut lines = Vec::new();
    for line in py_splitlines(&text) {
        let line = HEADER.replace(line, "");
        let line = BULLET.replace(&line, "");
        let mut line = STAR_BULLET.replace(&line, "").into_owned();
        while line.contains("**") {
            let updated = BOLD.replace_all(&line, "${1}").into_owned();
            if updated == line {
                break;
            }
            line = updated;
        }
        let line = strip_single_emphasis(&line);
        lines.push(line.trim_end_matches(py_space).to_string());
    }
    let text = RULE.replace_all(&lines.join("\n"), "").into_owned();
    let text = text.replace("• ", "").replace("    ", "");
    BLANK_LINES.replace_all(&text, "\n").into_owned()
}

/// Upstream `_normalize_lyrics`: a line's leading `[tag]`s are kept and the rest of that line is
/// dropped, `"] "`, `" ["` and `" ^ "` break lines, tags are lowercased, `"[start]\n"` is prefixed.
pub fn normalize_lyrics(lyrics: &str) -> String {
    let lines: Vec<&str> = lyrics
        .split('\n')
        .map(|line| match LEADING_TAGS.captures(line) {
            Some(caps) => caps
                .get(1)
                .map_or("", |m| m.as_str().trim_matches(py_space)),
            None => line,
        })
        .collect();
    let text = lines
        .join("\n")
        .replace("] ", "]\n")
        .replace(" [", "\n[")
        .replace(" ^ ", "\n");
    let text = LYRIC_TAG.replace_all(&text, |caps: &Captures| {
        format!("[{}]", caps[1].to_lowercase())
    });
    format!("[start]\n{text}")
}

/// The whole prompt string (no chat template is applied upstream); errors on a caption or lyrics
/// that is empty after trimming.
pub fn prompt_text(caption: &str, lyrics: &str) -> Result<String> {
    for (what, value) in [("caption", caption), ("lyrics", lyrics)] {
        if value.trim_matches(py_space).is_empty() {
            return Err(Error::input(OP_TEXT, format!("the {what} is empty")));
        }
    }
    let (caption, lyrics) = (clean_caption(caption), normalize_lyrics(lyrics));
    Ok(format!(
        "<|im_start|><|caption_start|>{caption}<|caption_end|>\
         <|lyrics_start|>{lyrics}<|lyrics_end|><|im_end|><|audio_start|>"
    ))
}

/// Both rows [conditional, unconditional], each of length P.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptIds {
    /// The tokenised prompt.
    pub cond: Vec<u32>,
    /// The classifier-free-guidance row, the same length as `cond`.
    pub uncond: Vec<u32>,
}

/// Checks 3 <= P <= MAX_PROMPT_TOKENS (the CFG row keeps the first and the last two tokens).
fn check_len(len: usize) -> Result<()> {
    if len > MAX_PROMPT_TOKENS {
        return Err(Error::input(
            OP_IDS,
            format!("the prompt has {len} tokens; the maximum is {MAX_PROMPT_TOKENS}"),
        ));
    }
    if len < 3 {
        return Err(Error::input(
            OP_IDS,
            format!("the prompt has {len} tokens; at least 3 are needed"),
        ));
    }
    Ok(())
}

/// Checks every id of one row is inside the model's vocabulary.
fn check_ids(row: &str, ids: &[u32], vocab: usize) -> Result<()> {
    match ids.iter().position(|&id| id as usize >= vocab) {
        Some(pos) => Err(Error::input(
            OP_IDS,
            format!(
                "{row} id {} at position {pos} is outside the vocabulary of {vocab}",
                ids[pos]
            ),
        )),
        None => Ok(()),
    }
}

impl PromptIds {
    /// From ready conditional ids: builds the CFG row; checks 3 <= len <= MAX_PROMPT_TOKENS and
    /// every id < vocab.
    pub fn from_cond(cond: Vec<u32>, vocab: usize) -> Result<Self> {
        check_len(cond.len())?;
        let mut uncond = cond.clone();
        let p = uncond.len();
        // `unconditional_ids[:, 1:-2] = _AUDIO_CFG_TOKEN_ID`
        uncond[1..p - 2].fill(CFG_FILLER);
        Self::from_pair(cond, uncond, vocab)
    }

    /// From a [2, P] pair given by the user (e.g. an .npy file): checks shape/length/ids < vocab.
    pub fn from_pair(cond: Vec<u32>, uncond: Vec<u32>, vocab: usize) -> Result<Self> {
        if cond.len() != uncond.len() {
            return Err(Error::input(
                OP_IDS,
                format!(
                    "the conditional row has {} tokens but the unconditional row has {}",
                    cond.len(),
                    uncond.len()
                ),
            ));
        }
        check_len(cond.len())?;
        check_ids("conditional", &cond, vocab)?;
        check_ids("unconditional", &uncond, vocab)?;
        Ok(Self { cond, uncond })
    }

    /// P, the length of each row.
    pub fn len(&self) -> usize {
        self.cond.len()
    }

    /// Whether the rows are empty (never, once constructed).
    pub fn is_empty(&self) -> bool {
        self.cond.is_empty()
    }
}

/// A Hugging Face tokenizer whose special tokens were checked against the checkpoint's ids.
#[derive(Debug)]
pub struct PromptTokenizer {
    tokenizer: Tokenizer,
    name: String,
}

impl PromptTokenizer {
    /// Loads tokenizer.json and checks the special tokens above exist with those ids.
    pub fn from_file(path: &Path) -> Result<Self> {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| Error::io(OP_TOKENIZER, name.clone(), e))?;
        let tokenizer = Tokenizer::from_bytes(bytes).map_err(|e| Error::Format {
            op: OP_TOKENIZER,
            path: name.clone(),
            reason: e.to_string(),
        })?;
        Self::from_tokenizer(tokenizer, &name)
    }

    /// Wraps a tokenizer (`name` names it in errors); checks the special tokens like `from_file`.
    pub fn from_tokenizer(mut t: Tokenizer, name: &str) -> Result<Self> {
        let malformed = |reason: String| Error::Format {
            op: OP_TOKENIZER,
            path: name.to_string(),
            reason,
        };
        for (token, id) in SPECIAL_TOKENS {
            let found = t.token_to_id(token);
            let problem = match found {
                None => format!("special token {token} is missing (expected id {id})"),
                Some(f) if f != id => format!("special token {token} has id {f}, expected {id}"),
                Some(_) => {
                    // It must also survive encoding as one piece, i.e. be an added token.
                    let enc = t
                        .encode(token, false)
                        .map_err(|e| malformed(e.to_string()))?;
                    if enc.get_ids() == [id] {
                        continue;
                    }
                    format!(
                        "special token {token} encodes to {:?}, expected [{id}]",
                        enc.get_ids()
                    )
                }
            };
            return Err(malformed(problem));
        }
        // transformers disables the file's truncation and padding for `tokenizer(text)`.
        t.with_truncation(None)
            .map_err(|e| malformed(e.to_string()))?;
        t.with_padding(None);
        Ok(Self {
            tokenizer: t,
            name: name.to_string(),
        })
    }

    /// caption + lyrics -> PromptIds (cond encoded, uncond derived), with all checks.
    pub fn encode(&self, caption: &str, lyrics: &str, vocab: usize) -> Result<PromptIds> {
        let text = prompt_text(caption, lyrics)?;
        // `tokenizer(text)` adds special tokens; Qwen2's post-processor adds none (no BOS).
        let encoding = self.tokenizer.encode(text.as_str(), true).map_err(|e| {
            Error::config(OP_TOKENIZER, format!("{}: encoding failed: {e}", self.name))
        })?;
        let ids = encoding.get_ids().to_vec();
        // The CFG rule assumes the template's first token and last two survive unchanged.
        check_len(ids.len())?;
        if ids.first() != Some(&IM_START) || !ids.ends_with(&[IM_END, AUDIO_START]) {
            return Err(Error::Format {
                op: OP_TOKENIZER,
                path: self.name.clone(),
                reason: format!(
                    "the prompt encodes to {:?} ... {:?}, not {IM_START} ... {IM_END}, \
                     {AUDIO_START} (does the post-processor add tokens?)",
                    ids.first(),
                    &ids[ids.len().saturating_sub(2)..]
                ),
            });
        }
        PromptIds::from_cond(ids, vocab)
    }
}
