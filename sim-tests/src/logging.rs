//! Logs of simulated runs: off unless `LODE_SIM_LOG` names a filter (for
//! example `LODE_SIM_LOG=info,openraft=warn`), because 800 runs of five
//! members would drown any useful line.

use std::sync::Once;

pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if let Ok(filter) = std::env::var("LODE_SIM_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_timer(SimulatedTime)
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}

/// Stamps a line with the simulated time since the run began (wall-clock
/// time says nothing about a simulated run).
struct SimulatedTime;

impl tracing_subscriber::fmt::time::FormatTime for SimulatedTime {
    fn format_time(&self, writer: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        match turmoil::sim_elapsed() {
            Some(elapsed) => write!(writer, "{:>10.3}s", elapsed.as_secs_f64()),
            None => write!(writer, "{:>11}", "-"),
        }
    }
}
