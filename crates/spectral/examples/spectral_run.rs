//! Same as `vortex spectral CONFIG.toml [OUT_DIR] [RESTART]`, for use before the CLI is wired.
fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 2 {
        eprintln!("usage: spectral_run CONFIG.toml [OUT_DIR] [RESTART]");
        std::process::exit(2);
    }
    let cfg = std::path::PathBuf::from(&args[1]);
    let out = args
        .get(2)
        .map(Into::into)
        .unwrap_or_else(|| std::path::PathBuf::from("runs/out").join(cfg.file_stem().unwrap()));
    let opts = spectral::run::RunOptions {
        out,
        restart: args.get(3).map(Into::into),
        progress: true,
        overwrite: false,
    };
    match spectral::run::run_file(&cfg, &opts) {
        Ok(s) => println!("{}", s.report()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
