//! The frame program and the stage against transformers' `CsmForConditionalGeneration` (the
//! oracle fixtures, f32, random-small, CPU backend): teacher-forced, every frame's backbone
//! hidden, codebook-0 logits, each depth level's hidden and logits and the next backbone input
//! within relative L2 1e-4; free-running, the greedy and noise codes and the drawn end frame
//! identical (a draw may differ only where the oracle's margin is below `NEAR_TIE`; none is).

mod common;

use chorus_cpu::CpuBackend;
use common::oracle::{free_running, teacher_forced, REL_L2};

fn cpu() -> CpuBackend {
    CpuBackend::new(Some(1)).unwrap()
}

#[test]
fn teacher_forcing_matches_the_oracle_greedy() {
    teacher_forced(cpu(), "small_greedy", REL_L2);
}

#[test]
fn teacher_forcing_matches_the_oracle_noise() {
    teacher_forced(cpu(), "small_noise", REL_L2);
}

#[test]
fn teacher_forcing_matches_the_oracle_stop() {
    teacher_forced(cpu(), "small_stop", REL_L2);
}

#[test]
fn greedy_codes_equal_the_oracle() {
    free_running(cpu(), "small_greedy", REL_L2);
}

#[test]
fn noise_codes_equal_the_oracle() {
    free_running(cpu(), "small_noise", REL_L2);
}

#[test]
fn the_drawn_end_frame_ends_where_the_oracle_does() {
    free_running(cpu(), "small_stop", REL_L2);
}
