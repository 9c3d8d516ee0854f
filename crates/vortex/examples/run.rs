//! `cargo run -p vortex-method --release --example run -- CONFIG.toml [OUT] [RESTART]` (until the
//! binary wires `vortex run`).
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let out = a.get(2).map(std::path::PathBuf::from);
    let rs = a.get(3).map(std::path::PathBuf::from);
    if let Err(e) = method::run::run(std::path::Path::new(&a[1]), out.as_deref(), rs.as_deref()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
