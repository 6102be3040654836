//! Host-side f32 tensors: what checkpoint loading produces and backends upload.

use crate::{Error, Result};

/// A dense row-major f32 tensor in host memory.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl HostTensor {
    /// Wraps `data`, checking that it holds exactly `shape`'s element count.
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(Error::Shape {
                op: "HostTensor::new",
                name: "data".into(),
                expected: shape,
                found: vec![data.len()],
            });
        }
        Ok(Self { shape, data })
    }

    /// A tensor of zeros.
    pub fn zeros(shape: Vec<usize>) -> Self {
        let n = shape.iter().product();
        Self {
            shape,
            data: vec![0.0; n],
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Checks the shape, naming the tensor in the error.
    pub fn expect_shape(&self, op: &'static str, name: &str, expected: &[usize]) -> Result<()> {
        if self.shape != expected {
            return Err(Error::Shape {
                op,
                name: name.into(),
                expected: expected.to_vec(),
                found: self.shape.clone(),
            });
        }
        Ok(())
    }

    /// Reinterprets the data under a new shape of the same element count.
    pub fn reshape(mut self, shape: Vec<usize>) -> Result<Self> {
        let n: usize = shape.iter().product();
        if n != self.data.len() {
            return Err(Error::Shape {
                op: "HostTensor::reshape",
                name: "tensor".into(),
                expected: shape,
                found: self.shape,
            });
        }
        self.shape = shape;
        Ok(self)
    }

    /// Permutes the axes of a tensor (`perm[i]` is the source axis of output axis `i`).
    pub fn permute(&self, perm: &[usize]) -> Result<Self> {
        let rank = self.shape.len();
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::input(
                "HostTensor::permute",
                format!("permutation {perm:?} does not fit rank {rank}"),
            ));
        }
        let shape: Vec<usize> = perm.iter().map(|&p| self.shape[p]).collect();
        let mut src_strides = vec![1usize; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            src_strides[i] = src_strides[i + 1] * self.shape[i + 1];
        }
        let strides: Vec<usize> = perm.iter().map(|&p| src_strides[p]).collect();
        let mut data = Vec::with_capacity(self.data.len());
        let mut index = vec![0usize; rank];
        for _ in 0..self.data.len() {
            let offset: usize = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
            data.push(self.data[offset]);
            for axis in (0..rank).rev() {
                index[axis] += 1;
                if index[axis] < shape[axis] {
                    break;
                }
                index[axis] = 0;
            }
        }
        Ok(Self { shape, data })
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes (None where unknown): lets a loader refuse a model
/// whose host copy cannot fit instead of dying of memory exhaustion.
pub fn mem_available() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permute_transposes_a_matrix() {
        let t = HostTensor::new(vec![2, 3], vec![0., 1., 2., 3., 4., 5.]).unwrap();
        let p = t.permute(&[1, 0]).unwrap();
        assert_eq!(p.shape, vec![3, 2]);
        assert_eq!(p.data, vec![0., 3., 1., 4., 2., 5.]);
    }

    #[test]
    fn permute_rejects_a_repeated_axis() {
        let t = HostTensor::zeros(vec![2, 3]);
        assert!(t.permute(&[0, 0]).is_err());
    }

    #[test]
    fn new_rejects_a_wrong_length() {
        assert!(HostTensor::new(vec![2, 2], vec![0.0; 3]).is_err());
    }
}
