//! Batch buckets: a step of B streams runs at the smallest bucket >= B, padded with the dummy row.

use crate::{Error, Result, DEFAULT_BUCKETS, LARGE_BUCKET_STEP};

/// A sorted, de-duplicated, non-empty set of bucket sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets(Vec<usize>);

impl Buckets {
    /// Validates and sorts the sizes; zero and an empty list are errors.
    pub fn new(sizes: &[usize]) -> Result<Self> {
        let mut v: Vec<usize> = sizes.to_vec();
        v.sort_unstable();
        v.dedup();
        if v.is_empty() || v[0] == 0 {
            return Err(Error::config(
                "Buckets::new",
                format!("bucket sizes must be non-empty and positive, got {sizes:?}"),
            ));
        }
        Ok(Self(v))
    }

    /// Parses a comma-separated list such as `1,2,4,8`.
    pub fn parse(text: &str) -> Result<Self> {
        let sizes = text
            .split(',')
            .map(|s| s.trim().parse::<usize>())
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| Error::config("Buckets::parse", format!("`{text}`: {e}")))?;
        Self::new(&sizes)
    }

    /// Keeps only the buckets below `cap`, plus `cap` itself as the largest bucket.
    pub fn capped(&self, cap: usize) -> Result<Self> {
        let mut v: Vec<usize> = self.0.iter().copied().filter(|&b| b < cap).collect();
        v.push(cap);
        Self::new(&v)
    }

    /// The buckets of a stage of up to `n` rows: [`DEFAULT_BUCKETS`] below `n`, then every
    /// [`LARGE_BUCKET_STEP`] rows past the last of them, then `n`. A loaded stage's steps sit
    /// between 1,024 and `n`: with `n` the next bucket there, 2,500 STT streams stepped ~1,400 at
    /// a time each ran as 2,500 and fell behind real time (docs/PERFORMANCE.md).
    pub fn up_to(n: usize) -> Result<Self> {
        let last = DEFAULT_BUCKETS[DEFAULT_BUCKETS.len() - 1];
        let beyond = (1..)
            .map(|k| last + k * LARGE_BUCKET_STEP)
            .take_while(|&b| b < n);
        let sizes: Vec<usize> = DEFAULT_BUCKETS
            .iter()
            .copied()
            .filter(|&b| b < n)
            .chain(beyond)
            .chain([n])
            .collect();
        Self::new(&sizes)
    }

    /// The bucket a batch of `batch` rows runs in.
    pub fn pick(&self, batch: usize) -> Result<usize> {
        self.0
            .iter()
            .copied()
            .find(|&b| b >= batch)
            .ok_or(Error::BatchTooLarge {
                op: "Buckets::pick",
                batch,
                largest: self.largest(),
            })
    }

    /// The largest bucket.
    pub fn largest(&self) -> usize {
        // The constructor guarantees at least one element.
        self.0[self.0.len() - 1]
    }

    /// The sizes, ascending.
    pub fn sizes(&self) -> &[usize] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_smallest_bucket_that_fits() {
        let b = Buckets::new(&[8, 1, 4, 4]).unwrap();
        assert_eq!(b.sizes(), &[1, 4, 8]);
        assert_eq!(b.pick(1).unwrap(), 1);
        assert_eq!(b.pick(2).unwrap(), 4);
        assert_eq!(b.pick(8).unwrap(), 8);
        assert!(matches!(
            b.pick(9),
            Err(Error::BatchTooLarge { largest: 8, .. })
        ));
    }

    #[test]
    fn rejects_zero_and_empty() {
        assert!(Buckets::new(&[]).is_err());
        assert!(Buckets::new(&[0, 2]).is_err());
        assert!(Buckets::parse("1,x").is_err());
    }

    #[test]
    fn a_stage_steps_by_large_buckets_past_the_defaults() {
        assert_eq!(Buckets::up_to(3).unwrap().sizes(), &[1, 2, 3]);
        assert_eq!(Buckets::up_to(1024).unwrap().sizes(), DEFAULT_BUCKETS);
        let b = Buckets::up_to(2500).unwrap();
        assert_eq!(
            &b.sizes()[DEFAULT_BUCKETS.len()..],
            &[1280, 1536, 1792, 2048, 2304, 2500]
        );
        // A step of 1,400 rows pads to 1,536, not to the stage's 2,500.
        assert_eq!(b.pick(1400).unwrap(), 1536);
        assert_eq!(Buckets::up_to(1280).unwrap().largest(), 1280);
        assert!(Buckets::up_to(0).is_err());
    }

    #[test]
    fn capping_keeps_the_cap_as_largest() {
        let b = Buckets::parse("1,2,4,8,16").unwrap().capped(6).unwrap();
        assert_eq!(b.sizes(), &[1, 2, 4, 6]);
    }
}
