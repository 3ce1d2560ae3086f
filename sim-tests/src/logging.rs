//! Logs of simulated runs: off unless `LODE_SIM_LOG` names a filter (for
//! example `LODE_SIM_LOG=info,openraft=warn`), because 800 runs of five
//! members would drown any useful line.

use std::sync::Once;

pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if let Ok(filter) = std::env::var("LODE_SIM_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
    });
}
