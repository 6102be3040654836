//! The oracle fixtures' files (`tests/fixtures/csm`, `tools/fixtures/README.md`).

#![allow(dead_code)]

pub mod join;
pub mod oracle;

use std::path::PathBuf;

use chorus_core::checkpoint::SafetensorsFile;
use chorus_csm::prompt::PromptFrame;
use serde_json::Value;

pub fn dir() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/csm"
    ))
}

pub fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join("manifest.json")).unwrap()).unwrap()
}

/// The manifest's entry and the tensors of case `name`.
pub fn case(name: &str) -> (Value, SafetensorsFile) {
    let m = manifest();
    let entry = m["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["case"] == name)
        .unwrap_or_else(|| panic!("no case {name}"))
        .clone();
    let file = SafetensorsFile::open(&dir().join(entry["file"].as_str().unwrap())).unwrap();
    (entry, file)
}

/// The prompt frames a case file recorded.
pub fn recorded_prompt(f: &SafetensorsFile, n: usize) -> Vec<PromptFrame> {
    let (_, kind) = f.load_i32("prompt_kind").unwrap();
    let (_, text) = f.load_i32("prompt_text").unwrap();
    let (shape, codes) = f.load_i32("prompt_codes").unwrap();
    assert_eq!(shape, vec![kind.len(), n]);
    (0..kind.len())
        .map(|p| match kind[p] {
            0 => PromptFrame::Text(text[p] as u32),
            1 => PromptFrame::Audio(
                codes[p * n..(p + 1) * n]
                    .iter()
                    .map(|&c| c as u32)
                    .collect(),
            ),
            k => panic!("frame kind {k}"),
        })
        .collect()
}
