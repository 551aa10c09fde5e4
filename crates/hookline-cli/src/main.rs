//! `hookline`: the operator command line. All logic lives in the library.

fn main() -> std::process::ExitCode {
    hookline_core::telemetry::no_error_backtraces();
    hookline_cli::main()
}
