//! The SEANet residual block op against the CPU backend (its two convolutions), over two
//! streaming calls with the history carried between them: in bf16 the fused tensor-core kernel
//! for the widths it serves, the two convolutions apart for the others and in f32.

mod common;

use chorus_core::{Backend, BufRole, Precision, ResBlockArgs, ResBlockGeom, Result};
use chorus_cuda::{CudaBackend, CudaOptions};
use common::*;

const MAX_SLOTS: usize = 7;
const DUMMY: usize = MAX_SLOTS;
const TOTAL_ROWS: usize = MAX_SLOTS + 1;
/// Slot rows: not 0..rows, and padded with the dummy row.
const SLOTS: [i32; 4] = [5, 1, DUMMY as i32, 3];

struct Problem {
    geom: ResBlockGeom,
    xs: [Vec<f32>; 2],
    w1: Vec<f32>,
    b1: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
    state: Vec<f32>,
}

impl Problem {
    fn new(seed: u64, c: usize, hidden: usize, dilation: usize, time: usize) -> Self {
        let mut r = Rng::new(seed);
        let geom = ResBlockGeom {
            rows: SLOTS.len(),
            time,
            c,
            hidden,
            kernel: 3,
            dilation,
        };
        let n = geom.rows * time * c;
        Self {
            xs: [r.vec(n, 1.5), r.vec(n, 1.5)],
            w1: r.vec(hidden * 3 * c, 0.2),
            b1: r.vec(hidden, 0.5),
            w2: r.vec(c * hidden, 0.3),
            b2: r.vec(c, 0.5),
            state: r.vec(TOTAL_ROWS * geom.first().history() * c, 1.0),
            geom,
        }
    }
}

/// Outputs of both calls, then the final history.
fn run<B: Backend>(be: &B, p: &Problem) -> Result<Vec<Vec<f32>>> {
    let g = p.geom;
    let w1 = be.upload(&p.w1, BufRole::Weight)?;
    let b1 = be.upload(&p.b1, BufRole::Weight)?;
    let w2 = be.upload(&p.w2, BufRole::Weight)?;
    let b2 = be.upload(&p.b2, BufRole::Weight)?;
    let mut state = be.upload(&p.state, BufRole::State)?;
    let mut slots = be.ints(g.rows, 0)?;
    for (i, &s) in SLOTS.iter().enumerate() {
        be.fill_ints(&mut slots, i, s)?;
    }
    let mut hidden = be.zeros(g.rows * g.time * g.hidden, BufRole::Activation)?;
    let mut out = be.zeros(g.rows * g.time * g.c, BufRole::Activation)?;
    let mut results = Vec::new();
    for (key, x) in p.xs.iter().enumerate() {
        let x = be.upload(x, BufRole::Activation)?;
        be.run(key, &mut |b: &B| {
            b.res_block(ResBlockArgs {
                x: &x,
                w1: &w1,
                b1: Some(&b1),
                state: Some(&mut state),
                slots: &slots,
                w2: &w2,
                b2: Some(&b2),
                hidden: &mut hidden,
                out: &mut out,
                geom: g,
            })
        })?;
        results.push(be.download(&out)?);
    }
    let history = g.first().history();
    results.push(without_dummy(&be.download(&state)?, history * g.c));
    Ok(results)
}

/// Checks every part against the CPU, and that bf16 took the fused kernel exactly when `fused`
/// (f32 never does); `fuse` off must take the two convolutions in bf16 too.
fn check(name: &str, p: Problem, fused: bool) {
    let want = run(&cpu(), &p).expect("cpu res_block");
    for precision in PRECISIONS {
        for fuse in [true, false] {
            if !chorus_cuda::cuda_available() {
                eprintln!("skipped: no CUDA device on this machine");
                return;
            }
            let be = CudaBackend::new(CudaOptions {
                precision,
                fuse_res_block: fuse,
                ..Default::default()
            })
            .expect("CudaBackend::new");
            let got = run(&be, &p).expect("cuda res_block");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_parity(&format!("{name} fuse {fuse} part {i}"), precision, g, w);
            }
            let ran = be.fused_res_blocks() > 0;
            let expect = fused && fuse && precision == Precision::Bf16;
            assert_eq!(
                ran,
                expect,
                "{name} [{}] fuse {fuse}: fused kernel taken",
                precision.name()
            );
        }
    }
}

#[test]
fn res_block_c64_fused_partial_tile() {
    // 2000 times: the last 64-time tile is partial, and its last warps have nothing to do.
    check(
        "res block 64/32 k3 t2000",
        Problem::new(1, 64, 32, 1, 2000),
        true,
    );
}

#[test]
fn res_block_c128_fused() {
    check(
        "res block 128/64 k3 t2048",
        Problem::new(2, 128, 64, 1, 2048),
        true,
    );
}

#[test]
fn res_block_dilated_history() {
    check(
        "res block 64/32 k3 d2 t4000",
        Problem::new(3, 64, 32, 2, 4000),
        true,
    );
}

#[test]
fn res_block_few_tiles_apart() {
    // Too few tiles for the fused kernel to pay: the two convolutions run.
    check(
        "res block 64/32 k3 t40",
        Problem::new(4, 64, 32, 1, 40),
        false,
    );
}

#[test]
fn res_block_width_without_kernel_apart() {
    check(
        "res block 32/16 k3 t2000",
        Problem::new(5, 32, 16, 1, 2000),
        false,
    );
}
