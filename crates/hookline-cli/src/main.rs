//! `hookline`: the operator command line. All logic lives in the library.

fn main() -> std::process::ExitCode {
    hookline_cli::main()
}
