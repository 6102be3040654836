//! Times the heaviest Mimi decoder ops, and one whole decoder frame built from the same ops, on
//! the CPU backend; prints the best of several runs, GFLOP/s per op and frames/s.
//!
//! `cargo run --release -p chorus-cpu --example ops_bench -- [threads]`

use chorus_core::{
    AttentionArgs, AttentionGeom, Backend, BufRole, Conv1dArgs, Conv1dGeom, ConvTr1dArgs,
    ConvTr1dGeom, LayerNormArgs, LinearArgs, Result, RvqEncodeArgs, KV_RING,
};
use chorus_cpu::{CpuBackend, CpuBuf, CpuInts};
use std::time::Instant;

/// Timed repetitions per measurement (the fastest is reported: on a shared machine the others
/// mostly measure the neighbours).
const REPS: usize = 15;
/// Untimed runs before timing.
const WARMUP: usize = 3;

fn filled(be: &CpuBackend, len: usize, seed: u32) -> Result<CpuBuf> {
    let v: Vec<f32> = (0..len)
        .map(|i| {
            ((i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 8) as f32
                / (1u32 << 24) as f32
                - 0.5
        })
        .collect();
    be.upload(&v, BufRole::Weight)
}

fn best_secs(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..WARMUP {
        f()?;
    }
    let mut times = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[0])
}

fn conv_flops(g: &Conv1dGeom) -> f64 {
    2.0 * (g.rows * g.time * g.c_out * g.kernel * g.c_in) as f64
}

fn convtr_flops(g: &ConvTr1dGeom) -> f64 {
    let per_in = if g.depthwise {
        g.c_out
    } else {
        g.c_in * g.c_out
    };
    2.0 * (g.rows * g.time * g.kernel * per_in) as f64
}

fn slots(be: &CpuBackend, rows: usize) -> Result<CpuInts> {
    let mut s = be.ints(rows, 0)?;
    for r in 0..rows {
        be.fill_ints(&mut s, r, r as i32)?;
    }
    Ok(s)
}

/// One conv1d call over `rows` slots; returns seconds per call.
fn time_conv(be: &CpuBackend, g: Conv1dGeom, residual: bool) -> Result<f64> {
    let x = filled(be, g.rows * g.time * g.c_in, 1)?;
    let w = filled(be, g.c_out * g.kernel * g.c_in, 2)?;
    let b = filled(be, g.c_out, 3)?;
    let res = filled(be, g.rows * g.time * g.c_out, 4)?;
    let mut state = be.zeros((g.rows + 1) * g.history() * g.c_in, BufRole::State)?;
    let mut out = be.zeros(g.rows * g.time * g.c_out, BufRole::Activation)?;
    let sl = slots(be, g.rows)?;
    best_secs(|| {
        be.conv1d(Conv1dArgs {
            x: &x,
            w: &w,
            bias: Some(&b),
            state: (g.history() > 0).then_some(&mut state),
            slots: &sl,
            residual: residual.then_some(&res),
            out: &mut out,
            geom: g,
        })
    })
}

fn time_convtr(be: &CpuBackend, g: ConvTr1dGeom) -> Result<f64> {
    let x = filled(be, g.rows * g.time * g.c_in, 1)?;
    let w_len = if g.depthwise {
        g.c_out * g.kernel
    } else {
        g.c_in * g.kernel * g.c_out
    };
    let w = filled(be, w_len, 2)?;
    let b = filled(be, g.c_out, 3)?;
    let mut state = be.zeros((g.rows + 1) * g.tail() * g.c_out, BufRole::State)?;
    let mut out = be.zeros(g.rows * g.time * g.stride * g.c_out, BufRole::Activation)?;
    let sl = slots(be, g.rows)?;
    best_secs(|| {
        be.conv_tr1d(ConvTr1dArgs {
            x: &x,
            w: &w,
            bias: (!g.depthwise).then_some(&b),
            state: &mut state,
            slots: &sl,
            out: &mut out,
            geom: g,
        })
    })
}

fn time_linear(be: &CpuBackend, n: usize, k: usize, m: usize) -> Result<f64> {
    let x = filled(be, n * k, 1)?;
    let w = filled(be, m * k, 2)?;
    let mut out = be.zeros(n * m, BufRole::Activation)?;
    best_secs(|| {
        be.linear(LinearArgs {
            x: &x,
            w: &w,
            out: &mut out,
            n,
            k,
            m,
        })
    })
}

fn time_attention(be: &CpuBackend, rows: usize) -> Result<f64> {
    let g = AttentionGeom {
        rows,
        time: 2,
        heads: 8,
        head_dim: 64,
        ring: KV_RING,
        window: 250,
        rope_theta: 10_000.0,
    };
    let hdim = g.heads * g.head_dim;
    let qkv = filled(be, rows * 2 * 3 * hdim, 1)?;
    let mut kv = filled(be, (rows + 1) * KV_RING * 2 * hdim, 2)?;
    let tokens = be.ints(rows + 1, 1000)?;
    let sl = slots(be, rows)?;
    let mut out = be.zeros(rows * 2 * hdim, BufRole::Activation)?;
    best_secs(|| {
        be.attention(AttentionArgs {
            qkv: &qkv,
            kv: &mut kv,
            tokens: &tokens,
            slots: &sl,
            out: &mut out,
            geom: g,
        })
    })
}

fn cg(rows: usize, time: usize, c_in: usize, c_out: usize, kernel: usize, elu: bool) -> Conv1dGeom {
    Conv1dGeom {
        rows,
        time,
        c_in,
        c_out,
        kernel,
        dilation: 1,
        elu_input: elu,
    }
}

fn tg(
    rows: usize,
    time: usize,
    c_in: usize,
    c_out: usize,
    kernel: usize,
    stride: usize,
) -> ConvTr1dGeom {
    ConvTr1dGeom {
        rows,
        time,
        c_in,
        c_out,
        kernel,
        stride,
        depthwise: false,
        elu_input: true,
    }
}

fn report(name: &str, secs: f64, flops: f64) {
    println!(
        "{name:<44} {:>9.3} ms {:>8.1} GFLOP/s",
        secs * 1e3,
        flops / secs / 1e9
    );
}

/// Times every op of one decoder frame separately and sums them (frames/s per row count).
fn frame(be: &CpuBackend, rows: usize) -> Result<()> {
    let mut total = 0.0;
    let mut flops = 0.0;
    let mut add = |name: &str, secs: f64, f: f64| {
        report(name, secs, f);
        total += secs;
        flops += f;
    };
    let n = rows * 2;
    let up = ConvTr1dGeom {
        rows,
        time: 1,
        c_in: 512,
        c_out: 512,
        kernel: 4,
        stride: 2,
        depthwise: true,
        elu_input: false,
    };
    add(
        "upsample dw convtr 512 k4 s2",
        time_convtr(be, up)?,
        convtr_flops(&up),
    );
    let layers = 8.0;
    let lin = |k: usize, m: usize| -> Result<(f64, f64)> {
        Ok((
            time_linear(be, n, k, m)? * layers,
            2.0 * (n * k * m) as f64 * layers,
        ))
    };
    for (name, (s, f)) in [
        ("8x linear 512->1536 (qkv)", lin(512, 1536)?),
        ("8x linear 512->512 (o)", lin(512, 512)?),
        ("8x linear 512->2048 (mlp up)", lin(512, 2048)?),
        ("8x linear 2048->512 (mlp down)", lin(2048, 512)?),
    ] {
        add(name, s, f);
    }
    let att_flops = 8.0 * (rows * 2 * 8 * 250 * 64 * 4) as f64;
    add(
        "8x attention 8x64, 250 keys",
        time_attention(be, rows)? * layers,
        att_flops,
    );
    let small = best_secs(|| {
        let x = be.zeros(n * 2048, BufRole::Activation)?;
        let mut y = x.clone();
        be.gelu(&mut y, n * 2048)?;
        let (g, b) = (
            be.zeros(512, BufRole::Weight)?,
            be.zeros(512, BufRole::Weight)?,
        );
        let mut o = be.zeros(n * 512, BufRole::Activation)?;
        be.layer_norm(LayerNormArgs {
            x: &o.clone(),
            gamma: &g,
            beta: &b,
            out: &mut o,
            n,
            dim: 512,
            eps: 1e-5,
        })
    })?;
    add("8x gelu + layer_norm (incl. alloc)", small * layers, 0.0);
    let convs = [
        (cg(rows, 2, 512, 1024, 7, false), false),
        (cg(rows, 16, 512, 256, 3, true), false),
        (cg(rows, 16, 256, 512, 1, true), true),
        (cg(rows, 96, 256, 128, 3, true), false),
        (cg(rows, 96, 128, 256, 1, true), true),
        (cg(rows, 480, 128, 64, 3, true), false),
        (cg(rows, 480, 64, 128, 1, true), true),
        (cg(rows, 1920, 64, 32, 3, true), false),
        (cg(rows, 1920, 32, 64, 1, true), true),
        (cg(rows, 1920, 64, 1, 3, true), false),
    ];
    let trs = [
        tg(rows, 2, 1024, 512, 16, 8),
        tg(rows, 16, 512, 256, 12, 6),
        tg(rows, 96, 256, 128, 10, 5),
        tg(rows, 480, 128, 64, 8, 4),
    ];
    for (i, (g, res)) in convs.iter().enumerate() {
        let name = format!("conv {}->{} k{} t{}", g.c_in, g.c_out, g.kernel, g.time);
        add(&name, time_conv(be, *g, *res)?, conv_flops(g));
        if i % 2 == 0 && i / 2 < trs.len() {
            let t = trs[i / 2];
            let name = format!(
                "convtr {}->{} k{} s{} t{}",
                t.c_in, t.c_out, t.kernel, t.stride, t.time
            );
            add(&name, time_convtr(be, t)?, convtr_flops(&t));
        }
    }
    println!(
        "rows {rows}: frame {:.2} ms, {:.2} GFLOP/row, {:.1} GFLOP/s, {:.1} frames/s",
        total * 1e3,
        flops / rows as f64 / 1e9,
        flops / total / 1e9,
        rows as f64 / total
    );
    Ok(())
}

/// Mimi's quantiser: latent width, codebook width and entries, books (the first semantic).
const RVQ_DIM: usize = 512;
const RVQ_CB_DIM: usize = 256;
const RVQ_CARD: usize = 2048;
const RVQ_BOOKS: usize = 8;

fn rvq_flops(rows: usize) -> f64 {
    // Two input projections and every level's scores.
    2.0 * (rows * (2 * RVQ_CB_DIM * RVQ_DIM + RVQ_BOOKS * RVQ_CB_DIM * RVQ_CARD)) as f64
}

fn time_rvq(be: &CpuBackend, rows: usize) -> Result<f64> {
    let x = filled(be, rows * RVQ_DIM, 11)?;
    let proj = filled(be, 2 * RVQ_CB_DIM * RVQ_DIM, 12)?;
    let codebooks = filled(be, RVQ_BOOKS * RVQ_CB_DIM * RVQ_CARD, 13)?;
    let norms = filled(be, RVQ_BOOKS * RVQ_CARD, 14)?;
    let mut codes = be.ints(rows * RVQ_BOOKS, 0)?;
    best_secs(|| {
        be.rvq_encode(RvqEncodeArgs {
            x: &x,
            proj: &proj,
            codebooks: &codebooks,
            norms: &norms,
            codes: &mut codes,
            rows,
            dim: RVQ_DIM,
            cb_dim: RVQ_CB_DIM,
            card: RVQ_CARD,
            books: RVQ_BOOKS,
            semantic_books: 1,
        })
    })
}

/// Rows of a transformer linear in one whole-file chunk of 32 frames (25 Hz tokens).
const WHOLE_FILE_ROWS: usize = 64;

fn main() -> Result<()> {
    let threads = std::env::args().nth(1).and_then(|s| s.parse().ok());
    let be = CpuBackend::new(threads)?;
    println!("{}", be.device_description());
    println!("--- linears at {WHOLE_FILE_ROWS} rows (a whole-file chunk's transformer)");
    for (k, m) in [(512, 1536), (512, 512), (512, 2048), (2048, 512)] {
        let n = WHOLE_FILE_ROWS;
        report(
            &format!("linear {n}x{k}->{m}"),
            time_linear(&be, n, k, m)?,
            2.0 * (n * k * m) as f64,
        );
    }
    // The encoder's last downsampling (super-columns of 8 steps of 512) and its output conv.
    for (ci, co, k) in [(4096, 1024, 2), (1024, 512, 3)] {
        let g = cg(1, WHOLE_FILE_ROWS, ci, co, k, true);
        report(
            &format!("conv {ci}->{co} k{k} t{WHOLE_FILE_ROWS}"),
            time_conv(&be, g, false)?,
            conv_flops(&g),
        );
    }
    let rows = WHOLE_FILE_ROWS;
    report(
        &format!("rvq_encode {rows} rows, 8 books of 2048 x 256"),
        time_rvq(&be, rows)?,
        rvq_flops(rows),
    );
    if std::env::args().nth(2).as_deref() == Some("linears") {
        return Ok(());
    }
    for rows in [1usize, 8] {
        println!("--- rows {rows}: heaviest SEANet shapes");
        let g = cg(rows, 2, 512, 1024, 7, false);
        report(
            "conv 512->1024 k7 t2",
            time_conv(&be, g, false)?,
            conv_flops(&g),
        );
        let t = tg(rows, 2, 1024, 512, 16, 8);
        report(
            "convtr 1024->512 k16 s8 t2",
            time_convtr(&be, t)?,
            convtr_flops(&t),
        );
        let t = tg(rows, 480, 128, 64, 8, 4);
        report(
            "convtr 128->64 k8 s4 t480",
            time_convtr(&be, t)?,
            convtr_flops(&t),
        );
        let g = cg(rows, 1920, 64, 32, 3, true);
        report(
            "conv 64->32 k3 t1920",
            time_conv(&be, g, false)?,
            conv_flops(&g),
        );
        println!("--- rows {rows}: whole frame, op by op");
        frame(&be, rows)?;
    }
    Ok(())
}
