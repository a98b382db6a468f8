//! Processes weft starts for tools (command tools, MCP servers over stdio) die with weft.
//!
//! A process killed with SIGKILL cannot stop its children, which are then reparented to pid 1
//! and finish whatever side effects they were making after another process has taken the
//! session over. On Linux the kernel can send a process a signal when its parent dies
//! (`PR_SET_PDEATHSIG`), but setting it takes code run in the child between `fork` and `exec`,
//! which is `unsafe` in Rust and forbidden in this workspace. weft's sandbox launcher
//! (`sandbox.rs`) does it: every tool program is started through it, sandboxed or not, and it
//! sets the signal and then `exec`s the program in the same process (same pid, same process
//! group, the exit status the program's own).
//!
//! - Only the program's own process gets the signal; processes it starts itself (a shell
//!   script's commands) are in its process group, which weft kills when a call is dropped
//!   while weft lives, but they are not killed by the kernel when weft dies.
//! - The signal is sent when the *thread* that spawned the process exits, not the process. Tool
//!   processes are spawned by `tokio::process::Command::spawn`, synchronously on the thread that
//!   polls the call's future: a worker thread of the tokio runtime (a task), or the thread in
//!   `Runtime::block_on` (the `weft` command's main thread), both of which live as long as the
//!   runtime. weft runs no tool call in `spawn_blocking` or `block_in_place`, whose threads come
//!   and go: a process spawned there would be killed when its thread is retired. Whoever embeds
//!   the tools must keep to that too.
//! - The program is looked up here first (a path, or a name on the `PATH` the process gets),
//!   and handed to the launcher as an absolute path; a program that is not found, or not
//!   executable, is spawned as it is, so that the error is weft's own and names it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

/// The `PATH` a process gets: the one its own environment sets, else weft's.
pub(crate) fn child_path<'a>(
    own: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Option<OsString> {
    own.into_iter()
        .find(|(k, _)| k.as_str() == "PATH")
        .map(|(_, v)| OsString::from(v))
        .or_else(|| std::env::var_os("PATH"))
}

/// `program` as an absolute path to an executable file: a path (relative to `cwd`) when it
/// has a `/`, else the first match on `path`.
pub(crate) fn resolve(program: &str, cwd: &Path, path: Option<&OsStr>) -> Option<PathBuf> {
    let found = if program.contains('/') {
        Some(cwd.join(program)).filter(|p| executable(p))
    } else if program.is_empty() {
        None
    } else {
        std::env::split_paths(path?)
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(program))
            .find(|p| executable(p))
    };
    std::path::absolute(found?).ok()
}

/// A file (or a link to one) that someone may execute.
pub(crate) fn executable(p: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
    #[cfg(not(unix))]
    {
        p.is_file()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_program_is_found_where_the_process_would_find_it() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let tool = bin.join("tool");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), bin.as_path()]).unwrap();
        // Not executable yet: not found (the spawn then fails with weft's own error).
        assert_eq!(resolve("tool", dir.path(), Some(&path)), None);
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve("tool", Path::new("/"), Some(&path)),
            Some(tool.clone())
        );
        assert_eq!(resolve("bin/tool", dir.path(), None), Some(tool.clone()));
        assert_eq!(
            resolve("./bin/tool", dir.path(), None),
            Some(dir.path().join("./bin/tool"))
        );
        assert_eq!(resolve("tool", dir.path(), None), None);
        assert_eq!(resolve("no-such-tool", Path::new("/"), Some(&path)), None);
    }
}
