//! `weft-sandbox POLICY-JSON -- PROGRAM ARGS...`: sets up the sandbox a tool runs in, then
//! runs PROGRAM in its place (see `weft_tools::sandbox`). The `weft` binary has the same as its
//! hidden `__sandbox` subcommand; this one is for the tools' own tests and other embedders.

fn main() -> std::process::ExitCode {
    #[cfg(target_os = "linux")]
    {
        weft_tools::sandbox::launch::main(std::env::args_os().skip(1))
    }
    #[cfg(not(target_os = "linux"))]
    {
        eprintln!("weft-sandbox: setup: unsupported: the sandbox needs Linux");
        std::process::ExitCode::from(125)
    }
}
