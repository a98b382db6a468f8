//! `weft-server-sandbox POLICY-JSON -- PROGRAM ARGS...`: the sandbox's launcher (see
//! `weft_tools::sandbox`), as weft-tools' `weft-sandbox` is, built with this package so that its
//! tests run command tools in the sandbox (a dependency's binaries are not built for them).

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
