//! Process limits that many concurrent streams run into.

/// Raises the soft limit on open files to the hard limit, since every stream holds a socket;
/// returns the limit now in force.
#[cfg(unix)]
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live, writable local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a pointer to a live local.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim = raised;
    }
    // rlim_t is u64 on Linux but not on every unix.
    #[allow(clippy::unnecessary_cast)]
    Ok(lim.rlim_cur as u64)
}

/// Elsewhere there is no such limit to raise.
#[cfg(not(unix))]
pub fn raise_open_file_limit() -> std::io::Result<u64> {
    Ok(u64::MAX)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let now = raise_open_file_limit().unwrap();
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above, a pointer to a live local.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
        #[allow(clippy::unnecessary_cast)]
        let cur = lim.rlim_cur as u64;
        assert_eq!(now, cur);
        assert_eq!(lim.rlim_cur, lim.rlim_max);
    }
}
