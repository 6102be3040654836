//! Run-time CPU feature dispatch for the hand-written loops.
//!
//! `dispatch!` wraps a function body so that it is compiled three times (AVX-512, AVX2+FMA, and
//! the baseline) and picks the widest version the CPU supports at each call; LLVM auto-vectorizes
//! each copy for its features. `is_x86_feature_detected!` caches its answer, so a call costs a load.

macro_rules! dispatch {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn inner($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                fn wide($($arg: $ty),*) {
                    inner($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                fn mid($($arg: $ty),*) {
                    inner($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU supports every feature `wide` enables (checked just above).
                    return unsafe { wide($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: the CPU supports every feature `mid` enables (checked just above).
                    return unsafe { mid($($arg),*) };
                }
            }
            inner($($arg),*)
        }
    };
}

pub(crate) use dispatch;
