//! CPU used by this process and by everything else during a timed window (Linux `/proc`), so a
//! run on a shared machine can be judged: background near 0 means the cores were ours alone.

/// Clock ticks per second used by `/proc/stat` and `/proc/self/stat` on Linux (USER_HZ).
const USER_HZ: f64 = 100.0;

pub struct Sampler {
    start: Option<(u64, u64)>,
}

impl Sampler {
    pub fn start() -> Self {
        Self { start: sample() }
    }

    /// Average cores kept busy over `secs` by (this process, everything else).
    pub fn cores(&self, secs: f64) -> Option<(f64, f64)> {
        let (sys0, own0) = self.start?;
        let (sys1, own1) = sample()?;
        let own = own1.saturating_sub(own0) as f64;
        let others = (sys1.saturating_sub(sys0) as f64 - own).max(0.0);
        Some((own / USER_HZ / secs, others / USER_HZ / secs))
    }
}

/// (busy ticks of the whole machine, busy ticks of this process).
fn sample() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpu: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // Fields: user nice system idle iowait irq softirq steal ...; idle and iowait are not busy.
    let busy = cpu.iter().sum::<u64>() - cpu.get(3)? - cpu.get(4)?;
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name: utime and stime are the 12th and 13th.
    let rest = own.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some((busy, utime + stime))
}
