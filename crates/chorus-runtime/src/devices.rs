//! `--devices`: the CUDA devices a server runs one engine on each (`all`, or ordinals).

use chorus_core::{Error, Result};

const OP_PARSE: &str = "DeviceList::parse";
const OP_RESOLVE: &str = "DeviceList::resolve";
/// What a `--devices` value looks like, for error messages.
const EXPECTED: &str = "give `all` or CUDA device ordinals such as `0,1`";

/// A `--devices` value, before the visible devices are known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceList {
    /// Every visible CUDA device.
    All,
    /// These ordinals, in this order, each once.
    Ordinals(Vec<usize>),
}

impl DeviceList {
    /// Parses `all` or comma-separated ordinals (`0,1`); an entry that is not an ordinal, or one
    /// given twice, is an error that names it.
    pub fn parse(s: &str) -> Result<Self> {
        let s = s.trim();
        if s == "all" {
            return Ok(Self::All);
        }
        let mut ordinals = Vec::new();
        for entry in s.split(',').map(str::trim) {
            let ordinal: usize = entry.parse().map_err(|_| {
                Error::input(
                    OP_PARSE,
                    format!("`{entry}` in `--devices {s}` is not a device ordinal: {EXPECTED}"),
                )
            })?;
            if ordinals.contains(&ordinal) {
                return Err(Error::input(
                    OP_PARSE,
                    format!("device {ordinal} is given twice in `--devices {s}`"),
                ));
            }
            ordinals.push(ordinal);
        }
        Ok(Self::Ordinals(ordinals))
    }

    /// The ordinals to use when `visible` CUDA devices are present: each must be below it.
    pub fn resolve(&self, visible: usize) -> Result<Vec<usize>> {
        if visible == 0 {
            return Err(Error::config(
                OP_RESOLVE,
                "`--devices` runs on CUDA, and no CUDA device is visible (is the driver loaded? \
                 CUDA_VISIBLE_DEVICES?)",
            ));
        }
        match self {
            Self::All => Ok((0..visible).collect()),
            Self::Ordinals(list) => {
                if let Some(bad) = list.iter().find(|&&o| o >= visible) {
                    return Err(Error::config(
                        OP_RESOLVE,
                        format!(
                            "device {bad} in `--devices` is not visible: this host has {visible} \
                             CUDA device(s), 0..={}",
                            visible - 1
                        ),
                    ));
                }
                Ok(list.clone())
            }
        }
    }
}

/// CUDA devices this process can see (0 without a driver or a device).
pub fn visible_cuda_devices() -> usize {
    // The probe loads the driver only when it is present: a missing one cannot be called.
    if !chorus_cuda::cuda_available() {
        return 0;
    }
    cudarc::driver::CudaContext::device_count().map_or(0, |n| usize::try_from(n).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_and_lists_resolve_against_the_visible_devices() {
        assert_eq!(
            DeviceList::parse("all").unwrap().resolve(2).unwrap(),
            [0, 1]
        );
        assert_eq!(
            DeviceList::parse("1, 0").unwrap().resolve(2).unwrap(),
            [1, 0]
        );
        assert_eq!(DeviceList::parse("3").unwrap().resolve(4).unwrap(), [3]);
    }

    #[test]
    fn a_bad_list_names_the_bad_entry() {
        let e = DeviceList::parse("0,0").unwrap_err().to_string();
        assert!(e.contains("device 0 is given twice"), "{e}");
        for (list, entry) in [("x", "`x`"), ("0,x", "`x`"), ("0,", "``"), ("-1", "`-1`")] {
            let e = DeviceList::parse(list).unwrap_err().to_string();
            assert!(e.contains(&format!("{entry} in `--devices {list}`")), "{e}");
        }
        let e = DeviceList::parse("7")
            .unwrap()
            .resolve(2)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("device 7") && e.contains("has 2 CUDA device"),
            "{e}"
        );
        let e = DeviceList::parse("0,2")
            .unwrap()
            .resolve(2)
            .unwrap_err()
            .to_string();
        assert!(e.contains("device 2"), "{e}");
    }

    #[test]
    fn no_visible_device_is_an_error_even_for_all() {
        let e = DeviceList::All.resolve(0).unwrap_err().to_string();
        assert!(e.contains("no CUDA device is visible"), "{e}");
    }
}
