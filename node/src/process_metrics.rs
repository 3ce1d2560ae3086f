//! The process metrics every Prometheus exporter publishes under the same
//! names (`process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! ...), read from `/proc/self` at each scrape. A member's CPU time per
//! request and its memory over a long run come from `/metrics` alone, so
//! the dashboards and alerts written for other servers work unchanged.
//!
//! Where `/proc` is missing (not Linux) or a file cannot be read or
//! parsed, the series it would give are left out of the scrape; nothing
//! here fails the scrape or panics on what the kernel wrote.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Entries of `/proc/self/fd` counted at most: a process cannot hold more
/// descriptors than its limit, and this bounds a scrape's work whatever
/// the directory holds.
const OPEN_FILES_COUNTED_MAX: usize = 1 << 20;

/// Registered on the root registry, so its series carry no `lode_` prefix.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// What `/proc/self/stat` tells of the process.
#[derive(Debug, PartialEq)]
struct ProcessStat {
    /// User and system time, in clock ticks.
    cpu_ticks: u64,
    threads: u64,
    /// Since the system booted, in clock ticks.
    start_ticks: u64,
    virtual_bytes: u64,
    resident_pages: u64,
}

/// Parses `/proc/self/stat` (proc(5)): the command name, in parentheses,
/// may itself hold spaces and parentheses, so fields are counted from the
/// last `)`; field 3 (the state) is the first after it.
fn parse_stat(text: &str) -> Option<ProcessStat> {
    let after_name = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_ascii_whitespace().collect();
    let field = |number: usize| -> Option<u64> { fields.get(number.checked_sub(3)?)?.parse().ok() };
    Some(ProcessStat {
        cpu_ticks: field(14)?.checked_add(field(15)?)?,
        threads: field(20)?,
        start_ticks: field(22)?,
        virtual_bytes: field(23)?,
        resident_pages: field(24)?,
    })
}

/// The system's boot time in seconds since the epoch (`btime` of
/// `/proc/stat`).
fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|seconds| seconds.trim().parse().ok())
}

/// This process's `/proc/self/stat`, where it can be read and parsed.
fn read_stat() -> Option<ProcessStat> {
    parse_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

/// The CPU time this process has used, in seconds, where `/proc` tells.
pub fn process_cpu_seconds() -> Option<f64> {
    Some(read_stat()?.cpu_ticks as f64 / ticks_per_second())
}

fn ticks_per_second() -> f64 {
    rustix::param::clock_ticks_per_second().max(1) as f64
}

fn open_files() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(entries.take(OPEN_FILES_COUNTED_MAX).count() as u64)
}

/// A count as a gauge's value (gauges are signed).
fn gauge_value(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

fn encode_gauge<Value: EncodeGaugeValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    value: Value,
) -> std::fmt::Result {
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, unit, gauge.metric_type())?;
    gauge.encode(metric)
}

/// The series `/proc/self/stat` (and `/proc/stat`'s boot time) give.
fn encode_stat(encoder: &mut DescriptorEncoder, stat: &ProcessStat) -> std::fmt::Result {
    let ticks_per_second = ticks_per_second();
    let cpu = ConstCounter::new(stat.cpu_ticks as f64 / ticks_per_second);
    let help = "User and system CPU time the process has used";
    let metric = encoder.encode_descriptor("process_cpu", help, Some(&Unit::Seconds), cpu.metric_type())?;
    cpu.encode(metric)?;
    let resident = stat.resident_pages.saturating_mul(rustix::param::page_size() as u64);
    let help = "Resident memory of the process";
    encode_gauge(
        encoder,
        "process_resident_memory",
        help,
        Some(&Unit::Bytes),
        gauge_value(resident),
    )?;
    let help = "Virtual memory of the process";
    let virtual_bytes = gauge_value(stat.virtual_bytes);
    encode_gauge(
        encoder,
        "process_virtual_memory",
        help,
        Some(&Unit::Bytes),
        virtual_bytes,
    )?;
    let help = "Threads of the process";
    encode_gauge(encoder, "process_threads", help, None, gauge_value(stat.threads))?;
    let boot = std::fs::read_to_string("/proc/stat").ok();
    if let Some(boot) = boot.as_deref().and_then(parse_boot_time) {
        let start = boot as f64 + stat.start_ticks as f64 / ticks_per_second;
        let help = "When the process started, in seconds since the Unix epoch";
        encode_gauge(encoder, "process_start_time", help, Some(&Unit::Seconds), start)?;
    }
    Ok(())
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        if let Some(stat) = read_stat() {
            encode_stat(&mut encoder, &stat)?;
        }
        if let Some(open) = open_files() {
            let help = "Open file descriptors";
            encode_gauge(&mut encoder, "process_open_fds", help, None, gauge_value(open))?;
            if let Some(limit) = rustix::process::getrlimit(rustix::process::Resource::Nofile).current {
                let help = "The most file descriptors the process may open";
                encode_gauge(&mut encoder, "process_max_fds", help, None, gauge_value(limit))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real line's shape, with a command name that holds a space and
    /// both parentheses.
    const STAT: &str = "4242 (lode (member) 1) S 1 4242 4242 0 -1 4194560 9031 0 2 0 \
        250 75 0 0 20 0 9 0 123456 734003200 21000 18446744073709551615 1 1 0 0 0 0 0 4096 17647 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn a_stat_line_is_read_from_after_the_command_name() {
        assert_eq!(
            parse_stat(STAT),
            Some(ProcessStat {
                cpu_ticks: 325,
                threads: 9,
                start_ticks: 123_456,
                virtual_bytes: 734_003_200,
                resident_pages: 21_000,
            })
        );
    }

    #[test]
    fn a_cut_or_garbled_stat_line_gives_nothing() {
        assert_eq!(parse_stat(""), None);
        assert_eq!(parse_stat("4242 lode S 1"), None);
        assert_eq!(parse_stat(&STAT[..60]), None);
        assert_eq!(parse_stat(&STAT.replace("250 75", "250 x")), None);
    }

    #[test]
    fn the_boot_time_is_the_btime_line() {
        assert_eq!(
            parse_boot_time("cpu  1 2 3\nbtime 1764900000\nprocesses 7\n"),
            Some(1_764_900_000)
        );
        assert_eq!(parse_boot_time("cpu  1 2 3\n"), None);
        assert_eq!(parse_boot_time("btime soon\n"), None);
    }
}
