//! CPU time and memory of the processes involved, read from `/proc` (Linux only).
//!
//! CPU: `utime + stime` (fields 14 and 15 of `/proc/PID/stat`) in clock ticks, per component: the edge and
//! worker children by pid, PostgreSQL (every process named `postgres`: postmaster and backends, counted process
//! by process), RabbitMQ (the Erlang VM `beam.smp` and its helpers), and the benchmark itself (the load
//! generator). PostgreSQL's figure covers the whole server, so other clients running at the same time inflate
//! it: run on an otherwise idle machine.
//!
//! A process that exits between two readings cannot be read at the second one. For the groups (PostgreSQL,
//! RabbitMQ) its time is recovered from its parent: a reaped child's whole lifetime is added to the parent's
//! `cutime + cstime` (fields 16 and 17), so a member's reading is its own plus its reaped children's ticks, and
//! what a member that exited had already used at the first reading is subtracted (see [`group_delta`]). Without
//! this, the backends of a client that disconnects before the phase ends — pgbench's, every one of them — were
//! billed to "other". The same counter gives the benchmark's child processes (pgbench) to the bench column.
//! Machine-wide busy time
//! comes from the first line of `/proc/stat`, so the table can say whether the box was saturated.
//!
//! Memory: `VmHWM` (peak resident set) from `/proc/PID/status`. Writing `5` to `/proc/PID/clear_refs` resets the
//! peak, which gives a per-phase peak; the overall peak is the maximum of every reading.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use serde::Serialize;

/// Clock ticks per second (`getconf CLK_TCK`; 100 on every common Linux when it cannot be asked).
///
/// Asked through `getconf` because `sysconf` would need `unsafe`, which the workspace forbids.
pub fn clock_ticks_per_sec() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// One process's CPU ticks: its own (`utime + stime`) and those of its children it has reaped
/// (`cutime + cstime`: each reaped child's whole lifetime, its own reaped children included).
#[derive(Debug, Clone, Copy, Default)]
struct Ticks {
    own: u64,
    children: u64,
}

/// `(comm, ticks)` of one process, or `None` if it is gone.
fn stat(pid: u32) -> Option<(String, Ticks)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm is in parentheses and may itself contain spaces or parentheses: split at the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text[open + 1..close].to_string();
    let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // fields[0] is field 3 (state), so utime, stime, cutime, cstime (14–17) are at 11–14.
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
    let own = field(11)? + field(12)?;
    let children = field(13).unwrap_or(0) + field(14).unwrap_or(0);
    Some((comm, Ticks { own, children }))
}

/// CPU ticks (user + system) consumed so far by `pid` itself.
pub fn process_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, t)| t.own)
}

/// Ticks of every live process whose command name is in `names`, by pid: its own plus its reaped children's.
fn ticks_by_comm(names: &[&str]) -> HashMap<u32, u64> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
        .filter_map(|pid| stat(pid).map(|s| (pid, s)))
        .filter(|(_, (comm, _))| names.contains(&comm.as_str()))
        .map(|(pid, (_, t))| (pid, t.own + t.children))
        .collect()
}

/// Ticks a group of processes used between two readings (each reading: own + reaped children's ticks, by pid).
///
/// Process by process: one that started in between counts from zero. One that exited in between cannot be read
/// at `b`, but its parent — a member of the group: PostgreSQL's backends are the postmaster's children — reaped
/// it, and its whole lifetime is in the parent's delta; what it had used at `a` belongs to earlier windows and is
/// subtracted. Summing the groups first would be wrong (a pid's reading is not comparable across processes).
/// A child not yet reaped at `b` is counted in the window that reaps it.
fn group_delta(a: &HashMap<u32, u64>, b: &HashMap<u32, u64>) -> u64 {
    let grown: u64 = b
        .iter()
        .map(|(pid, t)| t.saturating_sub(a.get(pid).copied().unwrap_or(0)))
        .sum();
    let gone: u64 = a
        .iter()
        .filter(|(pid, _)| !b.contains_key(pid))
        .map(|(_, t)| *t)
        .sum();
    grown.saturating_sub(gone)
}

/// Machine-wide `(busy, total)` ticks from `/proc/stat` (idle and iowait count as not busy).
fn machine_ticks() -> (u64, u64) {
    let Ok(text) = std::fs::read_to_string("/proc/stat") else {
        return (0, 0);
    };
    let Some(line) = text.lines().next() else {
        return (0, 0);
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum(); // user nice system idle iowait irq softirq steal
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total.saturating_sub(idle), total)
}

/// Microseconds during which at least one task was stalled on I/O (`some total` of `/proc/pressure/io`, Linux
/// ≥ 4.20 with PSI); `None` where the kernel does not expose it.
fn io_stall_us() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/pressure/io").ok()?;
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))
        .and_then(|t| t.parse().ok())
}

/// Peak resident set (`VmHWM`) of `pid` in KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resets `VmHWM` of `pid` to its current RSS (Linux ≥ 4.0). False when not permitted.
pub fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// One reading of every component's CPU counters.
#[derive(Debug, Clone)]
pub struct CpuSnapshot {
    at: Instant,
    edge: Option<u64>,
    worker: Option<u64>,
    postgres: HashMap<u32, u64>,
    rabbitmq: HashMap<u32, u64>,
    bench: u64,
    bench_children: u64,
    io_stall_us: Option<u64>,
    busy: u64,
    total: u64,
}

/// CPU seconds used by each component between two snapshots.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CpuUsage {
    /// Wall-clock seconds between the snapshots.
    pub wall_s: f64,
    /// `hookline-edge` (HTTP + embedded relay).
    pub edge_s: Option<f64>,
    /// `hookline-worker`.
    pub worker_s: Option<f64>,
    /// Every PostgreSQL process.
    pub postgres_s: f64,
    /// The RabbitMQ Erlang VM and helpers.
    pub rabbitmq_s: f64,
    /// The benchmark process (load generator, baseline clients, samplers).
    pub bench_s: f64,
    /// Busy CPU seconds of the whole machine not accounted to any component above: other programs running
    /// at the same time (a build, someone else's tests). Large values mean the phase was disturbed.
    pub other_s: f64,
    /// Machine-wide busy share of all cores, 0–100.
    pub machine_busy_pct: f64,
    /// Share of the wall time during which some task waited on the disk (PSI `io some`), 0–100. PostgreSQL's
    /// commits wait for fsync: a phase with a high value measured the disk (a shared virtual disk's bad
    /// moment), not the code. `None` without PSI.
    pub io_stall_pct: Option<f64>,
}

/// Pids of the children being measured (0 = not running) and the peaks seen so far.
#[derive(Debug)]
pub struct Monitor {
    ticks_per_sec: f64,
    edge: AtomicU32,
    worker: AtomicU32,
    edge_peak_kib: AtomicU64,
    worker_peak_kib: AtomicU64,
}

/// Per-phase peak RSS of the children, in MiB.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct RssPeaks {
    /// Edge peak during the phase.
    pub edge_mib: Option<f64>,
    /// Worker peak during the phase.
    pub worker_mib: Option<f64>,
}

impl Default for Monitor {
    fn default() -> Self {
        Monitor::new()
    }
}

impl Monitor {
    /// A monitor with no child registered.
    pub fn new() -> Monitor {
        Monitor {
            ticks_per_sec: clock_ticks_per_sec(),
            edge: AtomicU32::new(0),
            worker: AtomicU32::new(0),
            edge_peak_kib: AtomicU64::new(0),
            worker_peak_kib: AtomicU64::new(0),
        }
    }

    /// Registers (or, with `None`, forgets) the edge child.
    pub fn set_edge(&self, pid: Option<u32>) {
        self.edge.store(pid.unwrap_or(0), Ordering::SeqCst);
    }

    /// Registers (or forgets) the worker child.
    pub fn set_worker(&self, pid: Option<u32>) {
        self.worker.store(pid.unwrap_or(0), Ordering::SeqCst);
    }

    fn pid(a: &AtomicU32) -> Option<u32> {
        Some(a.load(Ordering::SeqCst)).filter(|p| *p != 0)
    }

    /// Reads every counter now.
    pub fn snapshot(&self) -> CpuSnapshot {
        let (busy, total) = machine_ticks();
        CpuSnapshot {
            at: Instant::now(),
            edge: Self::pid(&self.edge).and_then(process_ticks),
            worker: Self::pid(&self.worker).and_then(process_ticks),
            postgres: ticks_by_comm(&["postgres"]),
            rabbitmq: ticks_by_comm(&["beam.smp", "erl_child_setup", "epmd", "inet_gethost"]),
            bench: process_ticks(std::process::id()).unwrap_or(0),
            bench_children: stat(std::process::id())
                .map(|(_, t)| t.children)
                .unwrap_or(0),
            io_stall_us: io_stall_us(),
            busy,
            total,
        }
    }

    /// CPU seconds per component between `a` and `b`.
    pub fn usage(&self, a: &CpuSnapshot, b: &CpuSnapshot) -> CpuUsage {
        self.usage_inner(a, b, false)
    }

    /// As [`Monitor::usage`], with the CPU of the benchmark's child processes that exited and were reaped
    /// between `a` and `b` (an external load generator such as pgbench) counted as the benchmark's own. Only for
    /// windows in which no measured child (edge, worker) is reaped: its lifetime would be billed to the bench.
    pub fn usage_with_reaped_children(&self, a: &CpuSnapshot, b: &CpuSnapshot) -> CpuUsage {
        self.usage_inner(a, b, true)
    }

    fn usage_inner(&self, a: &CpuSnapshot, b: &CpuSnapshot, reaped_children: bool) -> CpuUsage {
        let s = |x: u64, y: u64| y.saturating_sub(x) as f64 / self.ticks_per_sec;
        let opt = |x: Option<u64>, y: Option<u64>| match (x, y) {
            (Some(x), Some(y)) => Some(s(x, y)),
            (None, Some(y)) => Some(s(0, y)), // started during the window: all its time is in it
            _ => None,
        };
        let total = b.total.saturating_sub(a.total);
        let edge_s = opt(a.edge, b.edge);
        let worker_s = opt(a.worker, b.worker);
        let postgres_s = s(0, group_delta(&a.postgres, &b.postgres));
        let rabbitmq_s = s(0, group_delta(&a.rabbitmq, &b.rabbitmq));
        let mut bench_s = s(a.bench, b.bench);
        if reaped_children {
            bench_s += s(a.bench_children, b.bench_children);
        }
        let known =
            edge_s.unwrap_or(0.0) + worker_s.unwrap_or(0.0) + postgres_s + rabbitmq_s + bench_s;
        let wall_s = b.at.duration_since(a.at).as_secs_f64();
        let io_stall_pct = match (a.io_stall_us, b.io_stall_us) {
            (Some(x), Some(y)) if wall_s > 0.0 => {
                Some((100.0 * y.saturating_sub(x) as f64 / 1e6 / wall_s).min(100.0))
            }
            _ => None,
        };
        CpuUsage {
            wall_s,
            edge_s,
            worker_s,
            postgres_s,
            rabbitmq_s,
            bench_s,
            // Per-process and machine-wide counters tick independently: small negatives are rounding.
            other_s: (s(a.busy, b.busy) - known).max(0.0),
            machine_busy_pct: if total == 0 {
                0.0
            } else {
                100.0 * b.busy.saturating_sub(a.busy) as f64 / total as f64
            },
            io_stall_pct,
        }
    }

    fn fold_peak(slot: &AtomicU64, kib: Option<u64>) {
        if let Some(k) = kib {
            slot.fetch_max(k, Ordering::SeqCst);
        }
    }

    /// Starts a per-phase peak: records the peak so far into the overall peak, then resets it.
    pub fn reset_peaks(&self) {
        for (pid, slot) in [
            (&self.edge, &self.edge_peak_kib),
            (&self.worker, &self.worker_peak_kib),
        ] {
            if let Some(pid) = Self::pid(pid) {
                Self::fold_peak(slot, peak_rss_kib(pid));
                reset_peak_rss(pid);
            }
        }
    }

    /// Peaks since the last reset (folded into the overall peaks as well).
    pub fn read_peaks(&self) -> RssPeaks {
        let read = |pid: &AtomicU32, slot: &AtomicU64| {
            let kib = Self::pid(pid).and_then(peak_rss_kib);
            Self::fold_peak(slot, kib);
            kib.map(|k| k as f64 / 1024.0)
        };
        RssPeaks {
            edge_mib: read(&self.edge, &self.edge_peak_kib),
            worker_mib: read(&self.worker, &self.worker_peak_kib),
        }
    }

    /// Overall peaks over the whole run (call [`Monitor::read_peaks`] first for an up-to-date value).
    pub fn overall_peaks(&self) -> RssPeaks {
        let mib = |slot: &AtomicU64| {
            let k = slot.load(Ordering::SeqCst);
            (k > 0).then(|| k as f64 / 1024.0)
        };
        RssPeaks {
            edge_mib: mib(&self.edge_peak_kib),
            worker_mib: mib(&self.worker_peak_kib),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let pid = std::process::id();
        assert!(process_ticks(pid).is_some());
        assert!(peak_rss_kib(pid).unwrap() > 0);
        let m = Monitor::new();
        let a = m.snapshot();
        let b = m.snapshot();
        let u = m.usage(&a, &b);
        assert!(u.bench_s >= 0.0 && u.edge_s.is_none());
    }

    #[test]
    fn a_member_that_exited_counts_only_its_time_after_the_first_reading() {
        // pid 1 = the parent; pid 2 exited between the readings having used 30 ticks at `a` and 50 in its life
        // (its 50 are in the parent's reaped-children count at `b`); pid 3 started after `a`.
        let a = HashMap::from([(1, 100), (2, 30)]);
        let b = HashMap::from([(1, 100 + 5 + 50), (3, 7)]);
        assert_eq!(group_delta(&a, &b), 5 + (50 - 30) + 7);
        // A member gone but not yet reaped: nothing is invented, the window is not negative.
        let b = HashMap::from([(1, 100)]);
        assert_eq!(group_delta(&a, &b), 0);
    }
}
