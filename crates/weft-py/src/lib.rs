//! The native module of the `weft` Python package (`weft._weft`): weft's runtime embedded in a
//! Python process. The Python side (`python/weft`) turns functions into tools and gives the
//! friendly API; this module runs agents and plans on weft's host ([`weft_host::task`],
//! [`weft_host::drive`]), exactly as the `weft` command does:
//!
//! - `process`: what the process keeps once: its async runtime, its host, its open stores;
//! - `tool`: a Python function as a weft tool (called on a thread of its own, the GIL taken
//!   only while Python runs);
//! - `agent`: an agent read from a file or given as text, with its Python tools; its runs,
//!   resumes and plans, each returning its outcome as JSON.
//!
//! Every call that waits for weft releases the GIL while it waits.

mod agent;
mod process;
mod tool;

use pyo3::prelude::*;

pyo3::create_exception!(
    _weft,
    WeftError,
    pyo3::exceptions::PyException,
    "What weft refused or could not do; the message is the one the `weft` command prints."
);

/// A weft error as the Python exception, with the message the `weft` command prints.
fn error(e: impl std::fmt::Display) -> PyErr {
    WeftError::new_err(e.to_string())
}

/// Runs `work` on weft's async runtime with the GIL released.
fn block_on<F>(py: Python<'_>, work: F) -> PyResult<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = process::runtime().map_err(error)?;
    Ok(py.detach(|| rt.block_on(work)))
}

/// [`block_on`] for a run driven under `shutdown`: Ctrl-C (SIGINT, seen by Python on its main
/// thread) stops the run at its next safe point, as `weft run` does, and the run's outcome
/// comes back with `true`; Python's `KeyboardInterrupt` is not raised here (the caller says
/// which session stopped).
fn block_on_run<F>(
    py: Python<'_>,
    shutdown: &weft_host::Shutdown,
    work: F,
) -> PyResult<(F::Output, bool)>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    let rt = process::runtime().map_err(error)?;
    let mut interrupted = false;
    let out = py.detach(|| {
        rt.block_on(async {
            let mut work = std::pin::pin!(work);
            let mut look = tokio::time::interval(std::time::Duration::from_millis(100));
            loop {
                tokio::select! {
                    out = &mut work => break out,
                    _ = look.tick() => {
                        // Signals are Python's to see, on its main thread (elsewhere: none).
                        if Python::attach(|py| py.check_signals()).is_err() {
                            interrupted = true;
                            shutdown.trigger();
                        }
                    }
                }
            }
        })
    });
    Ok((out, interrupted))
}

/// Starts a tool's process in weft's sandbox: the launcher `weft` runs as `weft __sandbox`,
/// run here as `python -c "..." POLICY -- PROGRAM ARGS...` (the arguments after `-c`). Returns
/// only when the launch failed, with its exit code.
#[pyfunction]
fn _sandbox(py: Python<'_>) -> PyResult<u8> {
    let argv: Vec<String> = py.import("sys")?.getattr("argv")?.extract()?;
    #[cfg(target_os = "linux")]
    {
        let code = weft_tools::sandbox::launch::main(argv.into_iter().skip(1).map(Into::into));
        Ok(if code == std::process::ExitCode::SUCCESS {
            0
        } else {
            125
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = argv;
        Err(error("the sandbox needs Linux"))
    }
}

/// Sends what the process's telemetry holds to the collector (called at exit).
#[pyfunction]
fn _finish(py: Python<'_>) -> PyResult<()> {
    let host = process::host();
    block_on(py, async move { host.telemetry.finish(None).await })
}

#[pymodule]
fn _weft(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("WeftError", m.py().get_type::<WeftError>())?;
    m.add_class::<agent::NativeAgent>()?;
    m.add_function(wrap_pyfunction!(agent::run_plan, m)?)?;
    m.add_function(wrap_pyfunction!(_sandbox, m)?)?;
    m.add_function(wrap_pyfunction!(_finish, m)?)?;
    process::set_launcher(m.py())?;
    Ok(())
}
