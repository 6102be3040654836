//! Checks a model family runs over a checkpoint before any data is read: each expected tensor
//! present with its shape, and no tensor the configuration has no place for.

use super::TensorSource;
use crate::{Error, Result};

/// How many names an unexpected-tensor error lists.
const NAMES_IN_ERROR: usize = 8;

/// A present tensor's shape against the expected one, before its data is read.
pub fn check_shape(
    op: &'static str,
    src: &dyn TensorSource,
    name: &str,
    expected: &[usize],
) -> Result<()> {
    match src.shape(name) {
        None => Err(Error::MissingTensor {
            op,
            name: name.into(),
            source_name: src.source_name().into(),
        }),
        Some(found) if found != expected => Err(Error::Shape {
            op,
            name: name.into(),
            expected: expected.to_vec(),
            found,
        }),
        Some(_) => Ok(()),
    }
}

/// Refuses the tensors of `src` that `known` does not accept (a layer count, codebook count or
/// vocabulary that does not match the checkpoint shows here), naming the first few.
pub fn refuse_unexpected(
    op: &'static str,
    src: &dyn TensorSource,
    known: impl Fn(&str) -> bool,
) -> Result<()> {
    let unexpected: Vec<String> = src.names().into_iter().filter(|n| !known(n)).collect();
    if unexpected.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = unexpected
        .iter()
        .take(NAMES_IN_ERROR)
        .map(String::as_str)
        .collect();
    Err(Error::Format {
        op,
        path: src.source_name().into(),
        reason: format!(
            "{} tensors the configuration has no place for (does config.json match the \
             checkpoint?): {}{}",
            unexpected.len(),
            shown.join(", "),
            if unexpected.len() > shown.len() {
                ", ..."
            } else {
                ""
            }
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MemorySource;
    use crate::HostTensor;

    fn source() -> MemorySource {
        let t = |n: usize| HostTensor::new(vec![n], vec![0.0; n]).unwrap();
        let names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        MemorySource::new("mem", names.iter().map(|n| (n.to_string(), t(2))).collect())
    }

    #[test]
    fn shapes_are_checked_by_name() {
        let src = source();
        assert!(check_shape("t", &src, "a", &[2]).is_ok());
        let e = check_shape("t", &src, "a", &[3]).unwrap_err().to_string();
        assert!(e.contains("[3]") && e.contains("[2]"), "{e}");
        let e = check_shape("t", &src, "zz", &[2]).unwrap_err().to_string();
        assert!(e.contains("zz"), "{e}");
    }

    #[test]
    fn unexpected_tensors_are_counted_and_the_first_named() {
        let src = source();
        assert!(refuse_unexpected("t", &src, |_| true).is_ok());
        let e = refuse_unexpected("t", &src, |n| n == "a")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("9 tensors") && e.contains("b, c") && e.ends_with(", ..."),
            "{e}"
        );
        assert!(
            e.contains(", i, ...") && !e.contains(", j"),
            "only the first {NAMES_IN_ERROR} are named: {e}"
        );
    }
}
