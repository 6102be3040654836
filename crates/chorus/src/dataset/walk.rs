//! Finding a data set's inputs (a folder tree, or a list of paths) and naming their outputs.

use super::{Failure, Job};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Extensions of the audio files `chorus encode --audio-dir` takes (any case).
pub const AUDIO_EXTENSIONS: &[&str] = &["wav", "flac", "mp3", "ogg", "oga", "opus"];
/// Extension of the codes files `chorus decode --codes-dir` takes.
pub const CODES_EXTENSIONS: &[&str] = &["npy"];

/// What was found: inputs relative to the root, and folders that could not be read.
pub struct Found {
    pub root: PathBuf,
    pub relative: Vec<PathBuf>,
    pub failed: Vec<Failure>,
}

/// Every file under `root` whose extension is one of `exts`, sorted, relative to `root`; the
/// folder `skip` (the output folder, when it lies inside and is not `root` itself) is not
/// entered. Links to files are followed, links to folders are not (no link loop can hang it).
pub fn walk_dir(root: &Path, exts: &[&str], skip: &Path) -> Result<Found> {
    if !root.is_dir() {
        bail!("{}: not a folder", root.display());
    }
    let skip = skip
        .canonicalize()
        .ok()
        .filter(|s| root.canonicalize().ok().as_ref() != Some(s));
    let mut found = Found {
        root: root.to_path_buf(),
        relative: Vec::new(),
        failed: Vec::new(),
    };
    let mut folders = vec![root.to_path_buf()];
    while let Some(dir) = folders.pop() {
        if skip.is_some() && dir.canonicalize().ok() == skip {
            continue;
        }
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                found.failed.push(Failure {
                    path: dir.clone(),
                    reason: format!("cannot read the folder: {e}"),
                });
                continue;
            }
        };
        for entry in entries {
            let Ok(entry) = entry else { continue };
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                folders.push(path);
            } else if (kind.is_file() || (kind.is_symlink() && path.is_file()))
                && has_extension(&path, exts)
            {
                if let Ok(rel) = path.strip_prefix(root) {
                    found.relative.push(rel.to_path_buf());
                }
            }
        }
    }
    found.relative.sort();
    Ok(found)
}

/// The paths of a list file, one per line (blank lines and `#` comments skipped). A relative
/// path is under `root` (default: the list's folder); an absolute one must lie under it too.
pub fn read_list(list: &Path, root: Option<&Path>) -> Result<Found> {
    let text =
        std::fs::read_to_string(list).with_context(|| format!("reading {}", list.display()))?;
    let root = match root {
        Some(r) => r.to_path_buf(),
        None => list.parent().unwrap_or(Path::new(".")).to_path_buf(),
    };
    let mut found = Found {
        root: root.clone(),
        relative: Vec::new(),
        failed: Vec::new(),
    };
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let path = Path::new(line);
        let rel = if path.is_absolute() {
            match path.strip_prefix(&root) {
                Ok(r) => r.to_path_buf(),
                Err(_) => {
                    found.failed.push(Failure {
                        path: path.to_path_buf(),
                        reason: format!(
                            "not under {}: its output path is undefined (pass --root)",
                            root.display()
                        ),
                    });
                    continue;
                }
            }
        } else {
            path.to_path_buf()
        };
        found.relative.push(rel);
    }
    Ok(found)
}

/// A job per input: the output is `out_dir/<relative path>` with the extension `ext`. Two inputs
/// that would write the same output (`a.wav` and `a.flac`) are refused but the first.
pub fn jobs(found: Found, out_dir: &Path, ext: &str) -> (Vec<Job>, Vec<Failure>) {
    let mut failed = found.failed;
    let mut by_output: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    let mut jobs = Vec::new();
    for rel in found.relative {
        let input = found.root.join(&rel);
        let output = out_dir.join(&rel).with_extension(ext);
        if let Some(first) = by_output.get(&output) {
            failed.push(Failure {
                reason: format!(
                    "{} would also be written by {}: rename one",
                    output.display(),
                    first.display()
                ),
                path: input,
            });
            continue;
        }
        by_output.insert(output.clone(), input.clone());
        jobs.push(Job { input, output });
    }
    (jobs, failed)
}

fn has_extension(path: &Path, exts: &[&str]) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| exts.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str) -> tempfile::TempDir {
        let root = tempfile::Builder::new()
            .prefix(&format!("chorus-walk-{name}-"))
            .tempdir()
            .unwrap();
        let d = root.path();
        for f in [
            "a.wav",
            "b/c.FLAC",
            "b/d/e.mp3",
            "b/notes.txt",
            "a.flac",
            "out/x.wav",
        ] {
            let p = d.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        root
    }

    #[test]
    fn walks_audio_skips_the_output_folder_and_refuses_colliding_outputs() {
        let d_tmp = tree("walk");
        let d = d_tmp.path();
        let found = walk_dir(d, AUDIO_EXTENSIONS, &d.join("out")).unwrap();
        let names: Vec<&str> = found.relative.iter().map(|p| p.to_str().unwrap()).collect();
        assert_eq!(names, ["a.flac", "a.wav", "b/c.FLAC", "b/d/e.mp3"]);
        let (jobs, failed) = jobs(found, &d.join("out"), "npy");
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[2].output, d.join("out/b/d/e.npy"));
        assert_eq!(failed.len(), 1);
        assert!(failed[0].path.ends_with("a.wav"), "{failed:?}");
        assert!(failed[0].reason.contains("a.flac"), "{failed:?}");
        // Outputs beside the inputs: the output folder is the root, and the root is walked.
        assert_eq!(walk_dir(d, AUDIO_EXTENSIONS, d).unwrap().relative.len(), 5);
    }

    #[test]
    fn a_list_resolves_against_its_folder_and_refuses_paths_outside_the_root() {
        let d_tmp = tree("list");
        let d = d_tmp.path();
        let list = d.join("files.txt");
        let outside = std::env::temp_dir().join("elsewhere.wav");
        std::fs::write(
            &list,
            format!(
                "# the set\nb/c.FLAC\n\n{}\n{}\n",
                d.join("a.wav").display(),
                outside.display()
            ),
        )
        .unwrap();
        let found = read_list(&list, None).unwrap();
        assert_eq!(
            found.relative,
            [PathBuf::from("b/c.FLAC"), PathBuf::from("a.wav")]
        );
        assert_eq!(found.failed.len(), 1);
        assert!(found.failed[0].reason.contains("--root"));
        assert!(read_list(&d.join("missing.txt"), None).is_err());
    }
}
