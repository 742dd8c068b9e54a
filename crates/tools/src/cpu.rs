//! CPU time used by this process and by the machine's PostgreSQL processes over a timed
//! side of a benchmark, read from Linux's `/proc`: whether a side was bound by CPU, and
//! whose, rather than by waiting (the ingestion ratios on a 2-core machine shared with
//! the database, `BENCHMARKS.md`). Where `/proc` cannot be read nothing is reported.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Clock ticks per second in `/proc/*/stat` (`USER_HZ`: 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// Fewer `nats-server` cores than this are an idle broker on the machine, not shown.
const BROKER_SHOWN_MIN: f64 = 0.005;

/// CPU ticks so far, and when they were read: this process's, and each PostgreSQL and
/// `nats-server` process's by its pid.
#[derive(Clone)]
pub(crate) struct CpuSnapshot {
    others: HashMap<u32, (Group, u64)>,
    this: u64,
    at: Instant,
}

/// The processes counted besides this one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Group {
    Postgres,
    Broker,
}

/// Average cores busy over an interval.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cores {
    /// Every process named `postgres` on the machine (its backends, writer, WAL writer…).
    pub(crate) postgres: f64,
    /// Every process named `nats-server` (the JetStream of `bench nats`; none elsewhere).
    pub(crate) broker: f64,
    /// This process: the server under test and the load generator.
    pub(crate) this: f64,
}

impl std::fmt::Display for Cores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PostgreSQL {:.2} cores, this process {:.2}",
            self.postgres, self.this
        )?;
        if self.broker >= BROKER_SHOWN_MIN {
            write!(f, ", nats-server {:.2}", self.broker)?;
        }
        Ok(())
    }
}

impl Cores {
    /// Microseconds of CPU an item cost, per process group, when `items` took `time` at
    /// these cores.
    fn micros_per_item(&self, time: Duration, items: usize) -> Cores {
        let per = |cores: f64| cores * time.as_secs_f64() * 1e6 / items.max(1) as f64;
        Cores {
            postgres: per(self.postgres),
            broker: per(self.broker),
            this: per(self.this),
        }
    }
}

/// Prints, on stderr, the cores a timed side of round `round` (from 0) kept busy and what
/// one of its `items` cost each process group: whether the side was bound by CPU, and
/// whose. Nothing when `/proc` could not be read.
pub(crate) fn report(round: usize, side: &str, time: Duration, items: usize, cpu: Option<Cores>) {
    let Some(cpu) = cpu else {
        return;
    };
    let per = cpu.micros_per_item(time, items);
    let broker = if cpu.broker >= BROKER_SHOWN_MIN {
        format!(", {:.1} µs of nats-server", per.broker)
    } else {
        String::new()
    };
    eprintln!(
        "round {}: {side} side used {cpu} ({:.1} µs of PostgreSQL, {:.1} µs of this process{broker} an item)",
        round + 1,
        per.postgres,
        per.this
    );
}

impl CpuSnapshot {
    /// Now; `None` without a readable `/proc`.
    pub(crate) fn now() -> Option<CpuSnapshot> {
        let this = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| ticks(&stat))?
            .1;
        let mut others = HashMap::new();
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            // A process may exit between listing and reading: skipped.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            let group = match ticks(&stat) {
                Some((name, used)) if name == "postgres" => (Group::Postgres, used),
                Some((name, used)) if name == "nats-server" => (Group::Broker, used),
                _ => continue,
            };
            others.insert(pid, group);
        }
        Some(CpuSnapshot {
            others,
            this,
            at: Instant::now(),
        })
    }

    /// The cores busy on average since this snapshot. Each process counts what it used
    /// since this snapshot, or since it started: a backend that a side's server opened
    /// counts whole. A process that exited meanwhile is missing, and with it only its own
    /// time, not (as with one sum over all processes) the time of the others.
    pub(crate) fn cores_since(&self) -> Option<Cores> {
        let now = CpuSnapshot::now()?;
        let seconds = now.at.duration_since(self.at).as_secs_f64();
        if seconds <= 0.0 {
            return None;
        }
        let used = |group: Group| -> u64 {
            now.others
                .iter()
                .filter(|(_, (g, _))| *g == group)
                .map(|(pid, (_, after))| match self.others.get(pid) {
                    Some((g, before)) if *g == group => after.saturating_sub(*before),
                    _ => *after,
                })
                .sum()
        };
        let cores = |ticks: u64| ticks as f64 / TICKS_PER_SECOND / seconds;
        Some(Cores {
            postgres: cores(used(Group::Postgres)),
            broker: cores(used(Group::Broker)),
            this: cores(now.this.saturating_sub(self.this)),
        })
    }
}

/// `(command name, user + system ticks)` of a `/proc/<pid>/stat` line.
fn ticks(stat: &str) -> Option<(String, u64)> {
    let (open, close) = (stat.find('(')?, stat.rfind(')')?);
    let name = stat.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // After the name: state is field 3 of stat(5), utime 14 and stime 15.
    let used = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((name, used))
}

#[cfg(test)]
mod tests {
    use super::ticks;

    #[test]
    fn a_stat_line_gives_its_name_and_ticks_even_with_spaces_and_parentheses_in_the_name() {
        let line =
            "4242 (post (gres) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 99 0 0";
        assert_eq!(ticks(line), Some(("post (gres) x".to_string(), 22)));
        assert_eq!(ticks("1 (init"), None);
    }
}
