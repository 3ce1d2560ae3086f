//! CPU time per request for `lode bench --cpu-of`: each member's
//! `process_cpu_seconds_total` scraped from its `/metrics` before and
//! after the run, and the bench's own CPU time, divided by the requests
//! done. On a shared machine the throughput of one run moves with
//! whatever else runs; the CPU a request costs moves far less, so two
//! builds compare better by it.

use anyhow::{anyhow, Context};
use lode_client::tls::ClientTls;

use super::bench_http::HttpConnection;

/// Most bytes of a `/metrics` answer read: a member's is tens of KiB.
const METRICS_BYTES_MAX: usize = 4 << 20;
/// The series every member exports with its CPU time.
const CPU_SERIES: &str = "process_cpu_seconds_total";

/// The CPU seconds each member and the bench had used at one moment.
#[derive(Debug, Clone)]
pub struct CpuReading {
    members: Vec<(String, f64)>,
    bench: Option<f64>,
}

/// CPU microseconds per request between two readings.
#[derive(Debug)]
pub struct CpuPerRequest {
    pub members: f64,
    pub by_member: Vec<(String, f64)>,
    /// `None` where the bench cannot read its own CPU time (no `/proc`).
    pub bench: Option<f64>,
}

/// Reads the CPU seconds of every member in `urls` (their HTTP ports,
/// `http://host:port`, or `https://` trusting `tls`'s CA) and of this
/// process.
pub async fn read(urls: &[String], token: Option<&str>, tls: Option<&ClientTls>) -> Result<CpuReading, anyhow::Error> {
    let mut members = Vec::with_capacity(urls.len());
    for url in urls {
        members.push((url.clone(), member_cpu_seconds(url, token, tls).await?));
    }
    let bench = lode_node::process_metrics::process_cpu_seconds();
    Ok(CpuReading { members, bench })
}

impl CpuReading {
    /// The CPU each of `requests` cost between `self` and the later `after`.
    pub fn per_request(&self, after: &CpuReading, requests: u64) -> CpuPerRequest {
        let micros = |before: f64, after: f64| (after - before).max(0.0) * 1e6 / requests.max(1) as f64;
        let by_member: Vec<(String, f64)> = self
            .members
            .iter()
            .zip(&after.members)
            .map(|((url, before), (_, after))| (url.clone(), micros(*before, *after)))
            .collect();
        CpuPerRequest {
            members: by_member.iter().map(|(_, micros)| micros).sum(),
            by_member,
            bench: self.bench.zip(after.bench).map(|(before, after)| micros(before, after)),
        }
    }
}

/// One member's `process_cpu_seconds_total`.
async fn member_cpu_seconds(url: &str, token: Option<&str>, tls: Option<&ClientTls>) -> Result<f64, anyhow::Error> {
    let scraped = async {
        let mut connection = HttpConnection::connect(url, "--cpu-of", token, tls).await?;
        connection
            .get("/metrics", ("metrics_bytes_max", METRICS_BYTES_MAX))
            .await
    };
    let body = scraped
        .await
        .with_context(|| format!("scraping {url}/metrics for --cpu-of"))?;
    let text = std::str::from_utf8(&body).context("the metrics are not UTF-8")?;
    cpu_seconds_in(text).ok_or_else(|| anyhow!("{url}/metrics has no {CPU_SERIES} (a member without /proc?)"))
}

/// The value of the CPU series in a metrics text.
fn cpu_seconds_in(text: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(CPU_SERIES)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_series_is_found_by_its_whole_name() {
        let text = "# TYPE process_cpu_seconds counter\n\
                    process_cpu_seconds_total_other 9\n\
                    process_cpu_seconds_total 12.5\n# EOF\n";
        assert_eq!(cpu_seconds_in(text), Some(12.5));
        assert_eq!(cpu_seconds_in("lode_raft_term 3\n"), None);
        assert_eq!(cpu_seconds_in("process_cpu_seconds_total many\n"), None);
    }

    #[test]
    fn cpu_per_request_divides_each_member_and_the_bench() {
        let reading = |first: f64, second: f64, bench: f64| CpuReading {
            members: vec![("a".to_owned(), first), ("b".to_owned(), second)],
            bench: Some(bench),
        };
        let per_request = reading(1.0, 2.0, 0.5).per_request(&reading(1.5, 2.25, 0.6), 1000);
        assert_eq!(
            per_request.by_member,
            vec![("a".to_owned(), 500.0), ("b".to_owned(), 250.0)]
        );
        assert_eq!(per_request.members, 750.0);
        assert!(per_request.bench.is_some_and(|bench| (bench - 100.0).abs() < 1e-6));
    }
}
