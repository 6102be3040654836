//! Each CUDA op against the CPU backend on random inputs, in f32 (TF32 off) and bf16. Every op
//! runs inside `Backend::run`, so what is checked is the captured graph's replay. Skips (passes
//! with a note) when no CUDA device is present.

mod common;

use chorus_core::{
    AttentionArgs, AttentionGeom, Backend, BufRole, Conv1dArgs, Conv1dGeom, ConvTr1dArgs,
    ConvTr1dGeom, EmbedArgs, LayerNormArgs, LinearArgs, Precision, ResetRowsArgs, Result,
    StagingDims, NO_CODE, NO_ROW,
};
use common::*;

/// Slot rows used by the tests: not 0..rows, and padded with the dummy row.
const MAX_SLOTS: usize = 7;
const DUMMY: usize = MAX_SLOTS;
const TOTAL_ROWS: usize = MAX_SLOTS + 1;
const SLOTS: [i32; 4] = [5, 1, DUMMY as i32, 3];

/// Inputs of a streaming convolution over two calls.
struct ConvProblem {
    geom: Conv1dGeom,
    xs: [Vec<f32>; 2],
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
    residual: Option<Vec<f32>>,
    state: Vec<f32>,
}

impl ConvProblem {
    fn new(seed: u64, geom: Conv1dGeom, bias: bool, residual: bool) -> Self {
        let mut r = Rng::new(seed);
        let n = geom.rows * geom.time;
        Self {
            xs: [r.vec(n * geom.c_in, 1.5), r.vec(n * geom.c_in, 1.5)],
            w: r.vec(geom.c_out * geom.kernel * geom.c_in, 0.3),
            bias: bias.then(|| r.vec(geom.c_out, 0.5)),
            residual: residual.then(|| r.vec(n * geom.c_out, 1.0)),
            state: r.vec(TOTAL_ROWS * geom.history() * geom.c_in, 1.0),
            geom,
        }
    }
}

/// Outputs of both calls, then the final state.
fn run_conv<B: Backend>(be: &B, p: &ConvProblem) -> Result<Vec<Vec<f32>>> {
    let g = p.geom;
    let w = be.upload(&p.w, BufRole::Weight)?;
    let bias = p
        .bias
        .as_ref()
        .map(|b| be.upload(b, BufRole::Weight))
        .transpose()?;
    let residual = p
        .residual
        .as_ref()
        .map(|b| be.upload(b, BufRole::Activation))
        .transpose()?;
    let mut state = if g.history() > 0 {
        Some(be.upload(&p.state, BufRole::State)?)
    } else {
        None
    };
    let mut slots = be.ints(g.rows, 0)?;
    for (i, &s) in SLOTS.iter().take(g.rows).enumerate() {
        be.fill_ints(&mut slots, i, s)?;
    }
    let mut out = be.zeros(g.rows * g.time * g.c_out, BufRole::Activation)?;
    let mut results = Vec::new();
    for (key, x) in p.xs.iter().enumerate() {
        let x = be.upload(x, BufRole::Activation)?;
        be.run(key, &mut |b: &B| {
            b.conv1d(Conv1dArgs {
                x: &x,
                w: &w,
                bias: bias.as_ref(),
                state: state.as_mut(),
                slots: &slots,
                residual: residual.as_ref(),
                out: &mut out,
                geom: g,
            })
        })?;
        results.push(be.download(&out)?);
    }
    if let Some(s) = &state {
        results.push(without_dummy(&be.download(s)?, g.history() * g.c_in));
    }
    Ok(results)
}

fn check_conv(name: &str, p: ConvProblem) {
    check_conv_path(name, p, false);
}

/// As `check_conv`, and in bf16 the op must have run on the tensor cores when `tensor_cores`.
fn check_conv_path(name: &str, p: ConvProblem, tensor_cores: bool) {
    let want = run_conv(&cpu(), &p).expect("cpu conv");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_conv(&be, &p).expect("cuda conv");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("{name} part {i}"), precision, g, w);
        }
        assert_tensor_core_path(name, &be, precision, tensor_cores);
    }
}

/// The tensor-core path runs in bf16 only, exactly for the shapes that should take it.
fn assert_tensor_core_path(name: &str, be: &chorus_cuda::CudaBackend, p: Precision, want: bool) {
    let ran = be.tensor_core_convs() > 0;
    if p == Precision::F32 {
        assert!(!ran, "{name}: f32 must keep the exact paths");
    } else {
        assert_eq!(ran, want, "{name}: tensor-core path taken in bf16");
    }
}

fn conv_geom(
    c_in: usize,
    c_out: usize,
    kernel: usize,
    dilation: usize,
    time: usize,
    elu: bool,
) -> Conv1dGeom {
    Conv1dGeom {
        rows: SLOTS.len(),
        time,
        c_in,
        c_out,
        kernel,
        dilation,
        elu_input: elu,
    }
}

/// Convolutions on the im2col product (pointwise with bias and residual, widening three taps
/// with a bias, pointwise with a residual alone): with the epilogue on, bias and residual are
/// added inside the product; off, by a second pass. Both must match the CPU.
#[test]
fn conv1d_products_add_bias_and_residual_in_their_epilogue() {
    let problems = [
        (
            "k1 bias+residual",
            conv_geom(48, 64, 1, 1, 7, true),
            true,
            true,
        ),
        (
            "k3 widening bias",
            conv_geom(16, 40, 3, 1, 9, false),
            true,
            false,
        ),
        (
            "k1 residual",
            conv_geom(32, 32, 1, 1, 5, false),
            false,
            true,
        ),
    ];
    for (i, (name, geom, bias, residual)) in problems.into_iter().enumerate() {
        let p = ConvProblem::new(60 + i as u64, geom, bias, residual);
        let want = run_conv(&cpu(), &p).expect("cpu conv");
        for precision in PRECISIONS {
            for epilogue in [true, false] {
                let Some(be) = cuda_with(chorus_cuda::CudaOptions {
                    precision,
                    gemm_epilogue: epilogue,
                    ..Default::default()
                }) else {
                    return;
                };
                let got = run_conv(&be, &p).expect("cuda conv");
                let label = format!("conv {name} epilogue {epilogue}");
                for (j, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_parity(&format!("{label} part {j}"), precision, g, w);
                }
                assert_eq!(be.epilogue_gemms() > 0, epilogue, "{label}: epilogue path");
            }
        }
    }
}

#[test]
fn conv1d_dilation1_bias_residual() {
    check_conv(
        "conv k3 d1 bias+residual",
        ConvProblem::new(1, conv_geom(16, 24, 3, 1, 5, false), true, true),
    );
}

#[test]
fn conv1d_dilation2_elu() {
    check_conv(
        "conv k3 d2 elu",
        ConvProblem::new(2, conv_geom(32, 16, 3, 2, 6, true), true, false),
    );
}

#[test]
fn conv1d_history_longer_than_time() {
    check_conv(
        "conv k7 t2 elu",
        ConvProblem::new(3, conv_geom(64, 40, 7, 1, 2, true), true, false),
    );
}

#[test]
fn conv1d_pointwise_elu_residual() {
    check_conv(
        "conv k1 elu residual",
        ConvProblem::new(4, conv_geom(16, 32, 1, 1, 4, true), true, true),
    );
}

#[test]
fn conv1d_few_outputs_direct() {
    check_conv(
        "conv k3 c_out 1",
        ConvProblem::new(5, conv_geom(64, 1, 3, 1, 9, true), true, false),
    );
}

#[test]
fn conv1d_few_outputs_many_tiles() {
    check_conv(
        "conv k3 d2 c_out 2 t300",
        ConvProblem::new(7, conv_geom(64, 2, 3, 2, 300, true), true, true),
    );
}

#[test]
fn conv1d_unaligned_channels() {
    check_conv(
        "conv c_in 12",
        ConvProblem::new(6, conv_geom(12, 20, 3, 2, 3, false), false, true),
    );
}

// Shapes of the tensor-core path in bf16 (c_in a multiple of 16, two taps or more, at least 128
// tiles of 64 times): a partial last tile, several output blocks with masked outputs, one output,
// a long history. A shape too small for it takes the cuBLAS paths (checked by the tests above).
#[test]
fn conv1d_tensor_cores_partial_tile_elu_bias() {
    check_conv_path(
        "mma conv k3 64->32 t2000 elu",
        ConvProblem::new(21, conv_geom(64, 32, 3, 1, 2000, true), true, false),
        true,
    );
}

#[test]
fn conv1d_tensor_cores_two_taps_residual() {
    check_conv_path(
        "mma conv k2 32->64 t2000 elu residual",
        ConvProblem::new(22, conv_geom(32, 64, 2, 1, 2000, true), true, true),
        true,
    );
}

#[test]
fn conv1d_tensor_cores_masked_output_blocks() {
    check_conv_path(
        "mma conv k3 d2 16->80 t2048 residual",
        ConvProblem::new(23, conv_geom(16, 80, 3, 2, 2048, false), true, true),
        true,
    );
}

#[test]
fn conv1d_tensor_cores_two_outputs() {
    check_conv_path(
        "mma conv k3 64->2 t2000 elu",
        ConvProblem::new(24, conv_geom(64, 2, 3, 1, 2000, true), true, false),
        true,
    );
}

/// As `check_conv` on a backend with the wide kernel on: it must run in bf16 only.
fn check_wide(name: &str, p: ConvProblem) {
    let want = run_conv(&cpu(), &p).expect("cpu conv");
    for precision in PRECISIONS {
        let Some(be) = cuda_wide(precision) else {
            return;
        };
        let got = run_conv(&be, &p).expect("cuda conv");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("{name} part {i}"), precision, g, w);
        }
        assert_eq!(
            be.wide_convs() > 0,
            precision == Precision::Bf16,
            "{name} [{}]: wide kernel taken",
            precision.name()
        );
    }
}

// The decoder's last stage's upsampling as output phases (128 -> 4 x 64, two taps, ELU'd input,
// history of one column): 4300 times per row put row ends inside the 128-time tiles.
#[test]
fn conv1d_wide_phase_shape_rows_inside_tiles() {
    check_wide(
        "wide conv k2 128->256 t4300 elu",
        ConvProblem::new(41, conv_geom(128, 256, 2, 1, 4300, true), true, false),
    );
}

#[test]
fn conv1d_wide_dilated_three_taps() {
    check_wide(
        "wide conv k3 d2 64->256 t4300 elu",
        ConvProblem::new(42, conv_geom(64, 256, 3, 2, 4300, true), true, false),
    );
}

#[test]
fn conv1d_wide_residual_plain_input() {
    check_wide(
        "wide conv k2 64->128 t8500 residual",
        ConvProblem::new(43, conv_geom(64, 128, 2, 1, 8500, false), true, true),
    );
}

/// As `check_conv`, and the one-output kernel must have run in `on` (and only there).
fn check_one_output(name: &str, p: ConvProblem, on: Precision) {
    let want = run_conv(&cpu(), &p).expect("cpu conv");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_conv(&be, &p).expect("cuda conv");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("{name} part {i}"), precision, g, w);
        }
        let ran = be.one_output_convs() > 0;
        assert_eq!(
            ran,
            precision == on,
            "{name} [{}]: one-output kernel taken",
            precision.name()
        );
    }
}

// The decoder's last layer (64 -> 1, seven taps, ELU'd input) takes the one-output tensor-core
// kernel in bf16; f32 keeps the exact direct path.
#[test]
fn conv1d_one_output_decoder_shape() {
    check_one_output(
        "conv k7 64->1 t2000 elu",
        ConvProblem::new(28, conv_geom(64, 1, 7, 1, 2000, true), true, false),
        Precision::Bf16,
    );
}

#[test]
fn conv1d_one_output_dilated_residual() {
    check_one_output(
        "conv k3 d3 64->1 t700 residual",
        ConvProblem::new(29, conv_geom(64, 1, 3, 3, 700, false), true, true),
        Precision::Bf16,
    );
}

#[test]
fn conv1d_one_output_history_longer_than_time() {
    check_one_output(
        "conv k7 64->1 t3 elu",
        ConvProblem::new(30, conv_geom(64, 1, 7, 1, 3, true), false, false),
        Precision::Bf16,
    );
}

#[test]
fn conv1d_tensor_cores_long_history() {
    check_conv_path(
        "mma conv k7 32->24 t2000",
        ConvProblem::new(25, conv_geom(32, 24, 7, 1, 2000, false), true, false),
        true,
    );
}

#[test]
fn conv1d_tensor_cores_blocks_walk_several_tiles() {
    // More tiles than resident blocks: each block loads its next window while computing one.
    check_conv_path(
        "mma conv k3 64->32 t30000 elu",
        ConvProblem::new(26, conv_geom(64, 32, 3, 1, 30_000, true), true, true),
        true,
    );
}

#[test]
fn conv1d_tensor_cores_uneven_chunks_odd_outputs() {
    // 48 channels are 6 vectors per row (no whole number per block width); 13 outputs are odd.
    check_conv_path(
        "mma conv k3 48->13 t2000",
        ConvProblem::new(27, conv_geom(48, 13, 3, 1, 2000, false), true, true),
        true,
    );
}

/// Inputs of a streaming transposed convolution over two calls.
struct ConvTrProblem {
    geom: ConvTr1dGeom,
    xs: [Vec<f32>; 2],
    w: Vec<f32>,
    bias: Option<Vec<f32>>,
    state: Vec<f32>,
}

fn run_convtr<B: Backend>(be: &B, p: &ConvTrProblem) -> Result<Vec<Vec<f32>>> {
    let g = p.geom;
    let w = be.upload(&p.w, BufRole::Weight)?;
    let bias = p
        .bias
        .as_ref()
        .map(|b| be.upload(b, BufRole::Weight))
        .transpose()?;
    let mut state = be.upload(&p.state, BufRole::State)?;
    let mut slots = be.ints(g.rows, 0)?;
    for (i, &s) in SLOTS.iter().take(g.rows).enumerate() {
        be.fill_ints(&mut slots, i, s)?;
    }
    let mut out = be.zeros(g.rows * g.time * g.stride * g.c_out, BufRole::Activation)?;
    let mut results = Vec::new();
    for (key, x) in p.xs.iter().enumerate() {
        let x = be.upload(x, BufRole::Activation)?;
        be.run(key, &mut |b: &B| {
            b.conv_tr1d(ConvTr1dArgs {
                x: &x,
                w: &w,
                bias: bias.as_ref(),
                state: &mut state,
                slots: &slots,
                out: &mut out,
                geom: g,
            })
        })?;
        results.push(be.download(&out)?);
    }
    results.push(without_dummy(&be.download(&state)?, g.tail() * g.c_out));
    Ok(results)
}

fn check_convtr(name: &str, seed: u64, geom: ConvTr1dGeom, bias: bool) {
    let mut r = Rng::new(seed);
    let n = geom.rows * geom.time;
    let w_len = if geom.depthwise {
        geom.c_out * geom.kernel
    } else {
        geom.c_in * geom.kernel * geom.c_out
    };
    let p = ConvTrProblem {
        xs: [r.vec(n * geom.c_in, 1.5), r.vec(n * geom.c_in, 1.5)],
        w: r.vec(w_len, 0.3),
        bias: bias.then(|| r.vec(geom.c_out, 0.5)),
        state: r.vec(TOTAL_ROWS * geom.tail() * geom.c_out, 1.0),
        geom,
    };
    let want = run_convtr(&cpu(), &p).expect("cpu convtr");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_convtr(&be, &p).expect("cuda convtr");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("{name} part {i}"), precision, g, w);
        }
    }
}

fn convtr_geom(
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
    time: usize,
    depthwise: bool,
    elu: bool,
) -> ConvTr1dGeom {
    ConvTr1dGeom {
        rows: SLOTS.len(),
        time,
        c_in,
        c_out,
        kernel,
        stride,
        depthwise,
        elu_input: elu,
    }
}

#[test]
fn conv_tr1d_dense_elu_bias() {
    check_convtr(
        "convtr dense k16 s8 elu",
        11,
        convtr_geom(32, 16, 16, 8, 2, false, true),
        true,
    );
}

#[test]
fn conv_tr1d_dense_plain() {
    check_convtr(
        "convtr dense k10 s5",
        12,
        convtr_geom(24, 8, 10, 5, 3, false, false),
        false,
    );
}

// Longer steps with several output vectors per column.
#[test]
fn conv_tr1d_long_step_elu_bias() {
    check_convtr(
        "convtr k8 s4 32->16 t70 elu",
        14,
        convtr_geom(32, 16, 8, 4, 70, false, true),
        true,
    );
}

#[test]
fn conv_tr1d_long_step_wide() {
    check_convtr(
        "convtr k8 s4 32->32 t40 elu",
        16,
        convtr_geom(32, 32, 8, 4, 40, false, true),
        true,
    );
}

#[test]
fn conv_tr1d_long_step_plain() {
    check_convtr(
        "convtr k10 s5 48->24 t33",
        15,
        convtr_geom(48, 24, 10, 5, 33, false, false),
        false,
    );
}

#[test]
fn conv_tr1d_depthwise() {
    check_convtr(
        "convtr depthwise k4 s2",
        13,
        convtr_geom(16, 16, 4, 2, 1, true, false),
        false,
    );
}

/// Attention over two calls, starting from random rings and token counts past the window and
/// past the ring size (so the ring wraps). `slots` name rows of a state with `total_rows` rows,
/// the last being the dummy; the outputs of the last `shared_pad` rows are dropped (padded rows
/// that share the dummy race on its ring, and their output is never used).
fn run_attention<B: Backend>(
    be: &B,
    seed: u64,
    geom: AttentionGeom,
    slots_of_rows: &[i32],
    total_rows: usize,
    shared_pad: usize,
) -> Result<Vec<Vec<f32>>> {
    let mut r = Rng::new(seed);
    let hd = geom.heads * geom.head_dim;
    let kv_row = geom.ring * 2 * hd;
    let mut kv = be.upload(&r.vec(total_rows * kv_row, 1.0), BufRole::State)?;
    let mut tokens = be.ints(total_rows, 0)?;
    for i in 0..total_rows - 1 {
        let start = [0, 37, 249, 250, 255, 300, 517][i % 7] + i / 7;
        be.fill_ints(&mut tokens, i, start as i32)?;
    }
    let mut slots = be.ints(geom.rows, 0)?;
    for (i, &s) in slots_of_rows.iter().enumerate() {
        be.fill_ints(&mut slots, i, s)?;
    }
    let mut out = be.zeros(geom.rows * geom.time * hd, BufRole::Activation)?;
    let mut results = Vec::new();
    for key in 0..2 {
        let qkv = be.upload(
            &r.vec(geom.rows * geom.time * 3 * hd, 1.0),
            BufRole::Activation,
        )?;
        be.run(key, &mut |b: &B| {
            b.attention(AttentionArgs {
                qkv: &qkv,
                kv: &mut kv,
                tokens: &tokens,
                slots: &slots,
                out: &mut out,
                geom,
            })?;
            b.advance_tokens(
                &mut tokens,
                &slots,
                geom.rows,
                geom.time as i32,
                total_rows - 1,
            )
        })?;
        let keep = (geom.rows - shared_pad) * geom.time * hd;
        results.push(be.download(&out)?[..keep].to_vec());
    }
    results.push(without_dummy(&be.download(&kv)?, kv_row));
    let counts: Vec<f32> = be
        .download_ints(&tokens)?
        .iter()
        .map(|&t| t as f32 + 1.0)
        .collect();
    results.push(counts);
    Ok(results)
}

/// Each precision on both attention kernels: every output within tolerance of the CPU, the
/// tensor-core kernel taken exactly where it applies (bf16, heads of 64), and its error against
/// the CPU no worse than the CUDA-core kernel's (its queries and probabilities keep about 16 bits).
fn check_attention(
    name: &str,
    geom: AttentionGeom,
    slots: &[i32],
    total_rows: usize,
    shared_pad: usize,
) {
    let want =
        run_attention(&cpu(), 21, geom, slots, total_rows, shared_pad).expect("cpu attention");
    for precision in PRECISIONS {
        let mut errors = Vec::new();
        for tensor_cores in [true, false] {
            let be = if tensor_cores {
                cuda(precision)
            } else {
                cuda_scalar_attention(precision)
            };
            let Some(be) = be else { return };
            let got = run_attention(&be, 21, geom, slots, total_rows, shared_pad)
                .expect("cuda attention");
            let path = if tensor_cores { "" } else { " cuda cores" };
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_parity(&format!("{name}{path} part {i}"), precision, g, w);
            }
            assert_eq!(got[3], want[3], "token counters differ");
            let mma = tensor_cores && precision == Precision::Bf16 && geom.head_dim == 64;
            assert_eq!(
                be.tensor_core_attentions() > 0,
                mma,
                "{name} [{}]: tensor-core kernel taken",
                precision.name()
            );
            errors.push(rel_l2(&got[0], &want[0]).max(rel_l2(&got[1], &want[1])));
        }
        assert!(
            errors[0] <= errors[1] * 1.1 + 1e-5,
            "{name} [{}]: the default kernel's error {:e} exceeds the CUDA-core kernel's {:e}",
            precision.name(),
            errors[0],
            errors[1]
        );
    }
}

#[test]
fn attention_ring_wrap_beyond_window() {
    let geom = AttentionGeom {
        rows: SLOTS.len(),
        time: 2,
        heads: 2,
        head_dim: 64,
        ring: chorus_core::KV_RING,
        window: 250,
        rope_theta: 10_000.0,
    };
    check_attention("attention", geom, &SLOTS, TOTAL_ROWS, 0);
}

/// Enough (row, head) pairs that the backend picks its narrow blocks for large batches.
/// A step of several frames (two query tiles per warp) at head_dim 32 (one channel per lane).
#[test]
fn attention_multi_frame_step_head_dim_32() {
    let geom = AttentionGeom {
        rows: SLOTS.len(),
        time: 6,
        heads: 4,
        head_dim: 32,
        ring: chorus_core::KV_RING,
        window: 250,
        rope_theta: 10_000.0,
    };
    check_attention("attention t6 d32", geom, &SLOTS, TOTAL_ROWS, 0);
}

/// The widest head (four channels per lane) and a narrow one (lanes past head_dim idle).
#[test]
fn attention_head_dims_128_and_16() {
    for (head_dim, time, ring, window) in [(128, 3, 64, 50), (16, 2, 32, 20)] {
        let geom = AttentionGeom {
            rows: SLOTS.len(),
            time,
            heads: 2,
            head_dim,
            ring,
            window,
            rope_theta: 10_000.0,
        };
        check_attention(
            &format!("attention d{head_dim}"),
            geom,
            &SLOTS,
            TOTAL_ROWS,
            0,
        );
    }
}

/// A long step (60 tokens) at a large batch: one group's queries per block would not fit in
/// shared memory, so each block takes one (row, head) with its keys split over its warps.
#[test]
fn attention_long_step_many_rows() {
    let rows = 140;
    let geom = AttentionGeom {
        rows,
        time: 60,
        heads: 8,
        head_dim: 64,
        ring: 160,
        window: 100,
        rope_theta: 10_000.0,
    };
    let total = rows + 1;
    let slots: Vec<i32> = (0..rows as i32).rev().collect();
    check_attention("attention t60 140 rows", geom, &slots, total, 0);
}

/// Steps longer than a group's span of queries in shared memory (64 tokens): 150 frames (300
/// tokens, past the 250-token window and five spans, the last partial), at a tiny batch and at
/// one that fills the GPU.
#[test]
fn attention_steps_of_many_query_spans() {
    let time = 300;
    let ring = chorus_mimi::decoder::ring_for(250, time);
    for rows in [SLOTS.len(), 140] {
        let geom = AttentionGeom {
            rows,
            time,
            heads: 8,
            head_dim: 64,
            ring,
            window: 250,
            rope_theta: 10_000.0,
        };
        if rows == SLOTS.len() {
            check_attention("attention t300 tiny batch", geom, &SLOTS, TOTAL_ROWS, 0);
        } else {
            let slots: Vec<i32> = (0..rows as i32).rev().collect();
            check_attention("attention t300 140 rows", geom, &slots, rows + 1, 0);
        }
    }
}

/// A tiny batch (the block's warps split each (row, head)'s keys) with a step of five frames:
/// a full query tile and a partial one, each merged over the block's warps.
#[test]
fn attention_tiny_batch_two_query_tiles() {
    let geom = AttentionGeom {
        rows: SLOTS.len(),
        time: 10,
        heads: 2,
        head_dim: 64,
        ring: chorus_core::KV_RING,
        window: 240,
        rope_theta: 10_000.0,
    };
    check_attention("attention t10 tiny batch", geom, &SLOTS, TOTAL_ROWS, 0);
}

/// A step of five frames (ten tokens: a full query tile and a partial one on the tensor-core
/// kernel) at a batch large enough for one warp per (row, head).
#[test]
fn attention_two_query_tiles_many_rows() {
    let rows = 200;
    let geom = AttentionGeom {
        rows,
        time: 10,
        heads: 8,
        head_dim: 64,
        ring: chorus_core::KV_RING,
        window: 240,
        rope_theta: 10_000.0,
    };
    let total = rows + 1;
    let slots: Vec<i32> = (0..rows as i32).collect();
    check_attention("attention t10 200 rows", geom, &slots, total, 0);
}

#[test]
fn attention_many_rows_small_ring() {
    let rows = 300;
    let geom = AttentionGeom {
        rows,
        time: 2,
        heads: 8,
        head_dim: 64,
        ring: 32,
        window: 30,
        rope_theta: 10_000.0,
    };
    // Every other slot of 2 * rows, in reverse, the last two entries padding.
    let total = 2 * rows + 1;
    let mut slots: Vec<i32> = (0..rows - 2).map(|i| (2 * (rows - 1 - i)) as i32).collect();
    slots.extend([(total - 1) as i32; 2]);
    check_attention("attention 300 rows", geom, &slots, total, 2);
}

/// LayerNorm, linear, GELU and an accumulating linear chained in one program (a transformer MLP
/// half with its layer scale folded into `fc2`).
fn run_dense<B: Backend>(be: &B, seed: u64) -> Result<Vec<Vec<f32>>> {
    let (n, dim, inter) = (6, 64, 96);
    let mut r = Rng::new(seed);
    let mut h = be.upload(&r.vec(n * dim, 2.0), BufRole::Activation)?;
    let gamma = be.upload(&r.vec(dim, 1.0), BufRole::Weight)?;
    let beta = be.upload(&r.vec(dim, 0.5), BufRole::Weight)?;
    let fc1 = be.upload(&r.vec(inter * dim, 0.2), BufRole::Weight)?;
    let fc2 = be.upload(&r.vec(dim * inter, 0.2), BufRole::Weight)?;
    let mut norm = be.zeros(n * dim, BufRole::Activation)?;
    let mut mid = be.zeros(n * inter, BufRole::Activation)?;
    let mut proj = be.zeros(n * dim, BufRole::Activation)?;
    be.run(0, &mut |b: &B| {
        b.layer_norm(LayerNormArgs {
            x: &h,
            gamma: &gamma,
            beta: &beta,
            out: &mut norm,
            n,
            dim,
            eps: 1e-5,
        })?;
        b.linear(LinearArgs {
            x: &norm,
            w: &fc1,
            out: &mut mid,
            n,
            k: dim,
            m: inter,
        })?;
        b.gelu(&mut mid, n * inter)?;
        b.linear(LinearArgs {
            x: &mid,
            w: &fc2,
            out: &mut proj,
            n,
            k: inter,
            m: dim,
        })?;
        b.linear_acc(LinearArgs {
            x: &mid,
            w: &fc2,
            out: &mut h,
            n,
            k: inter,
            m: dim,
        })
    })?;
    Ok(vec![
        be.download(&norm)?,
        be.download(&mid)?,
        be.download(&proj)?,
        be.download(&h)?,
    ])
}

#[test]
fn layer_norm_linear_gelu_linear_acc() {
    let want = run_dense(&cpu(), 31).expect("cpu dense");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_dense(&be, 31).expect("cuda dense");
        for (i, name) in ["layer_norm", "linear+gelu", "linear", "linear_acc"]
            .iter()
            .enumerate()
        {
            assert_parity(name, precision, &got[i], &want[i]);
        }
    }
}

/// Staging in, embedding, a stateful convolution, staging out: one program replayed over three
/// steps with new staged inputs each time (the graph must read the staging afresh).
fn run_staged<B: Backend>(be: &B, seed: u64) -> Result<Vec<Vec<f32>>> {
    let (rows, codebooks, card, dim, c_out) = (SLOTS.len(), 4, 32, 16, 8);
    let mut r = Rng::new(seed);
    let table = be.upload(&r.vec(codebooks * card * dim, 1.0), BufRole::Weight)?;
    let geom = Conv1dGeom {
        rows,
        time: 1,
        c_in: dim,
        c_out,
        kernel: 3,
        dilation: 1,
        elu_input: true,
    };
    let w = be.upload(&r.vec(c_out * 3 * dim, 0.3), BufRole::Weight)?;
    let mut state = be.zeros(TOTAL_ROWS * geom.history() * dim, BufRole::State)?;
    let mut slots = be.ints(rows, 0)?;
    let mut codes = be.ints(rows * codebooks, 0)?;
    let mut latents = be.zeros(rows * dim, BufRole::Activation)?;
    let mut emb = be.zeros(rows * dim, BufRole::Activation)?;
    let mut out = be.zeros(rows * c_out, BufRole::Activation)?;
    let mut staging = be.staging(StagingDims {
        rows,
        codebooks,
        latent_dim: dim,
        samples: c_out,
    })?;
    let mut results = Vec::new();
    for step in 0..3 {
        {
            let v = be.staging_view(&mut staging)?;
            v.slots.copy_from_slice(&SLOTS);
            for c in v.codes.iter_mut() {
                *c = r.below(card) as i32;
            }
            v.codes[step] = NO_CODE;
            v.latents.copy_from_slice(&r.vec(rows * dim, 0.5));
        }
        be.run(0, &mut |b: &B| {
            b.stage_in(&staging, &mut slots, &mut codes, &mut latents)?;
            b.embed_codes(EmbedArgs {
                codes: &codes,
                table: &table,
                latents: &latents,
                out: &mut emb,
                rows,
                codebooks,
                cardinality: card,
                dim,
            })?;
            b.conv1d(Conv1dArgs {
                x: &emb,
                w: &w,
                bias: None,
                state: Some(&mut state),
                slots: &slots,
                residual: None,
                out: &mut out,
                geom,
            })?;
            b.stage_out(&out, &mut staging)
        })?;
        results.push(be.staging_view(&mut staging)?.pcm.to_vec());
        results.push(be.download(&emb)?);
    }
    // A reset row reads as zeros; the other rows keep their state.
    be.zero_row(&mut state, 1, geom.history() * dim)?;
    results.push(without_dummy(&be.download(&state)?, geom.history() * dim));
    Ok(results)
}

#[test]
fn staged_program_replays_with_fresh_inputs() {
    let want = run_staged(&cpu(), 41).expect("cpu staged");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let got = run_staged(&be, 41).expect("cuda staged");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_parity(&format!("staged part {i}"), precision, g, w);
        }
        assert_eq!(
            be.graph_nodes(0).map(|n| n > 0),
            Some(true),
            "no graph was captured"
        );
    }
}

/// `reset_rows` and `reset_ints` inside a captured step: each replay reads the list as it is then
/// (a step's admitted slots), and writes exactly the listed rows (f32 and bf16 copies are exact).
/// Each replay's rows, then its counters.
type ResetRuns = (Vec<Vec<f32>>, Vec<Vec<i32>>);

fn run_resets<B: Backend>(be: &B) -> Result<ResetRuns> {
    let (rows, len, count) = (9usize, 700usize, 5usize);
    let mut r = Rng::new(5);
    let start = r.vec(rows * len, 1.0);
    let mut buf = be.upload(&start, BufRole::State)?;
    let mut zeroed = be.upload(&start, BufRole::State)?;
    let src = be.upload(&r.vec(len, 1.0), BufRole::State)?;
    let mut ints = be.ints(rows, 7)?;
    let mut list = be.ints(count, NO_ROW)?;
    let (mut floats, mut counts) = (vec![be.download(&buf)?, be.download(&src)?], Vec::new());
    for lists in [[3, NO_ROW, 8, NO_ROW, NO_ROW], [NO_ROW; 5], [0, 1, 2, 5, 6]] {
        for (i, &v) in lists.iter().enumerate() {
            be.fill_ints(&mut list, i, v)?;
        }
        be.run(0, &mut |b: &B| {
            b.reset_rows(ResetRowsArgs {
                buf: &mut buf,
                row_len: len,
                list: &list,
                count,
                src: Some(&src),
            })?;
            b.reset_rows(ResetRowsArgs {
                buf: &mut zeroed,
                row_len: len,
                list: &list,
                count,
                src: None,
            })?;
            b.reset_ints(&mut ints, &list, count, 0)
        })?;
        floats.push(be.download(&buf)?);
        floats.push(be.download(&zeroed)?);
        counts.push(be.download_ints(&ints)?);
    }
    Ok((floats, counts))
}

#[test]
fn reset_rows_in_a_replayed_step_match_the_cpu() {
    let (want, want_ints) = run_resets(&cpu()).expect("cpu resets");
    for precision in PRECISIONS {
        let Some(be) = cuda(precision) else { return };
        let (got, got_ints) = run_resets(&be).expect("cuda resets");
        assert_eq!(got_ints, want_ints, "{precision:?} reset_ints");
        let (start, src) = (&got[0], &got[1]);
        let len = src.len();
        // The CPU's rows, with this precision's stored values.
        for (i, (g, w)) in got.iter().zip(&want).enumerate().skip(2) {
            let expect: Vec<f32> = w
                .iter()
                .enumerate()
                .map(|(e, &v)| {
                    let (row, col) = (e / len, e % len);
                    let was = want[0][e];
                    if v == was {
                        start[e]
                    } else if v == 0.0 {
                        0.0
                    } else {
                        assert_eq!(v, want[1][col], "cpu row {row} is the source row");
                        src[col]
                    }
                })
                .collect();
            assert_eq!(g, &expect, "{precision:?} part {i}");
        }
        assert!(
            be.graph_nodes(0).is_some_and(|n| n > 0),
            "no graph was captured"
        );
    }
}
