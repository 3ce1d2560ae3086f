//! Runs one fuzz target under AFL++: `lode-fuzz <target>`, input on stdin
//! in AFL's persistent mode. Built by `fuzz/run` with `cargo afl build`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = lode_fuzz::target(&name) else {
        let names: Vec<&str> = lode_fuzz::TARGETS.iter().map(|target| target.name).collect();
        eprintln!("usage: lode-fuzz <target>; targets: {}", names.join(", "));
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
