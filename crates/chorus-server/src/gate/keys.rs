//! API keys: loaded from a file (one per line) and/or a comma-separated list, swapped whole on
//! reload, checked in constant time.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use chorus_core::{Error, Result};

/// The environment variable holding comma-separated keys.
pub const API_KEYS_ENV: &str = "CHORUS_API_KEYS";

/// The keys a server accepts. Clones share one set, so a reload is seen by every handler.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Arc<RwLock<Arc<Vec<Vec<u8>>>>>,
    file: Option<PathBuf>,
    listed: Vec<Vec<u8>>,
}

impl std::fmt::Debug for ApiKeys {
    // Never print a key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.len())
            .field("file", &self.file)
            .finish()
    }
}

impl ApiKeys {
    /// Keys from `file` (when given) and from `listed` (the value of `CHORUS_API_KEYS`, when
    /// set); `None` when neither is given. A file that cannot be read, a malformed key, or a
    /// source given with no key in it is an error: a server meant to be closed never opens.
    pub fn load(file: Option<&Path>, listed: Option<&str>) -> Result<Option<Self>> {
        if file.is_none() && listed.is_none() {
            return Ok(None);
        }
        let listed = match listed {
            Some(text) => {
                let keys = parse_list(text)?;
                if keys.is_empty() {
                    return Err(Error::config(
                        "ApiKeys::load",
                        format!("{API_KEYS_ENV} is set but holds no key (give comma-separated keys, or unset it)"),
                    ));
                }
                keys
            }
            None => Vec::new(),
        };
        let from_file = match file {
            Some(path) => read_key_file(path)?,
            None => Vec::new(),
        };
        let all = [from_file, listed.clone()].concat();
        Ok(Some(Self {
            keys: Arc::new(RwLock::new(Arc::new(all))),
            file: file.map(Path::to_path_buf),
            listed,
        }))
    }

    /// Keys given directly (tests, embedding).
    pub fn from_keys<S: AsRef<str>>(keys: &[S]) -> Result<Self> {
        let mut out = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            out.push(check_key(k.as_ref(), &format!("key {}", i + 1))?);
        }
        Ok(Self {
            keys: Arc::new(RwLock::new(Arc::new(out.clone()))),
            file: None,
            listed: out,
        })
    }

    /// Re-reads the key file (the listed keys stay); returns the number of keys now in force.
    /// On an error the keys in force are kept.
    pub fn reload(&self) -> Result<usize> {
        let Some(path) = &self.file else {
            return Ok(self.len());
        };
        let keys = [read_key_file(path)?, self.listed.clone()].concat();
        let n = keys.len();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        Ok(n)
    }

    /// The key file, when keys come from one.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Keys in force.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether no key is in force (never after a successful load).
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    /// Whether `given` is one of the keys. Every key is compared, each in time that depends on
    /// its own length only, so the answer's timing says nothing of how much of a key matched.
    pub fn accepts(&self, given: &[u8]) -> bool {
        let keys = self.current();
        let mut found = 0u8;
        for key in keys.iter() {
            found |= u8::from(constant_time_eq(key, given));
        }
        found == 1
    }

    fn current(&self) -> Arc<Vec<Vec<u8>>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `key == given`, reading every byte of `key` whatever `given` holds.
fn constant_time_eq(key: &[u8], given: &[u8]) -> bool {
    let mut diff = u8::from(key.len() != given.len());
    for (i, &k) in key.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!k);
        diff |= k ^ g;
    }
    // Keep the compiler from ending the loop at the first difference.
    std::hint::black_box(diff) == 0
}

fn read_key_file(path: &Path) -> Result<Vec<Vec<u8>>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io("ApiKeys::read_key_file", path.display().to_string(), e))?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        keys.push(check_key(
            line,
            &format!("{} line {}", path.display(), i + 1),
        )?);
    }
    if keys.is_empty() {
        return Err(Error::config(
            "ApiKeys::read_key_file",
            format!(
                "{} holds no key (one key per line; blank lines and `#` comments are skipped)",
                path.display()
            ),
        ));
    }
    Ok(keys)
}

fn parse_list(text: &str) -> Result<Vec<Vec<u8>>> {
    text.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .enumerate()
        .map(|(i, k)| check_key(k, &format!("{API_KEYS_ENV} entry {}", i + 1)))
        .collect()
}

/// A key travels in a header or a query string: visible ASCII with no space, `,` or `#`.
fn check_key(key: &str, at: &str) -> Result<Vec<u8>> {
    let bad = key
        .bytes()
        .position(|b| !b.is_ascii_graphic() || b == b',' || b == b'#');
    match bad {
        None if !key.is_empty() => Ok(key.as_bytes().to_vec()),
        None => Err(Error::config("ApiKeys", format!("{at}: empty key"))),
        Some(i) => Err(Error::config(
            "ApiKeys",
            format!(
                "{at}: character {} of the key is not allowed (keys are visible ASCII without spaces, `,` or `#`)",
                i + 1
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temp file holding `text`, removed when dropped.
    fn temp(name: &str, text: &str) -> tempfile::TempPath {
        let p = tempfile::Builder::new()
            .prefix(&format!("chorus-keys-{name}-"))
            .tempfile()
            .unwrap()
            .into_temp_path();
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn a_file_skips_blanks_and_comments_and_adds_the_listed_keys() {
        let p = temp("ok", "# ops keys\n\n  alpha-1  \n#beta\nbeta-2\n");
        let keys = ApiKeys::load(Some(&p), Some("gamma, ,delta"))
            .unwrap()
            .unwrap();
        assert_eq!(keys.len(), 4);
        for k in ["alpha-1", "beta-2", "gamma", "delta"] {
            assert!(keys.accepts(k.as_bytes()), "{k}");
        }
        for k in ["", "alpha", "alpha-1x", "#beta", "beta", "ALPHA-1"] {
            assert!(!keys.accepts(k.as_bytes()), "{k}");
        }
        std::fs::remove_file(&p).ok();
    }

    #[test]
    fn no_source_means_no_keys() {
        assert!(ApiKeys::load(None, None).unwrap().is_none());
    }

    #[test]
    fn bad_sources_are_errors_naming_the_place() {
        let missing = ApiKeys::load(Some(Path::new("/nonexistent/keys")), None).unwrap_err();
        assert!(
            missing.to_string().contains("/nonexistent/keys"),
            "{missing}"
        );
        let empty = temp("empty", "# nothing yet\n\n");
        let e = ApiKeys::load(Some(&empty), None).unwrap_err().to_string();
        assert!(e.contains("holds no key"), "{e}");
        let spaced = temp("spaced", "good\nbad key\n");
        let e = ApiKeys::load(Some(&spaced), None).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains("character 4"), "{e}");
        let e = ApiKeys::load(None, Some(" , ")).unwrap_err().to_string();
        assert!(e.contains(API_KEYS_ENV), "{e}");
        for p in [empty, spaced] {
            std::fs::remove_file(&p).ok();
        }
    }

    #[test]
    fn reload_swaps_the_file_keys_and_keeps_them_on_an_error() {
        let p = temp("reload", "old\n");
        let keys = ApiKeys::load(Some(&p), Some("listed")).unwrap().unwrap();
        let seen_by_handler = keys.clone();
        std::fs::write(&p, "new\n").unwrap();
        assert_eq!(keys.reload().unwrap(), 2);
        assert!(seen_by_handler.accepts(b"new") && seen_by_handler.accepts(b"listed"));
        assert!(!seen_by_handler.accepts(b"old"));
        std::fs::write(&p, "\n").unwrap();
        assert!(keys.reload().is_err());
        assert!(
            seen_by_handler.accepts(b"new"),
            "a failed reload keeps the keys"
        );
        std::fs::remove_file(&p).ok();
    }

    #[test]
    fn debug_never_prints_a_key() {
        let keys = ApiKeys::from_keys(&["s3cret"]).unwrap();
        let s = format!("{keys:?}");
        assert!(!s.contains("s3cret") && s.contains("keys: 1"), "{s}");
    }

    #[test]
    fn constant_time_eq_is_plain_equality() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
        assert!(constant_time_eq(b"", b""));
    }
}
