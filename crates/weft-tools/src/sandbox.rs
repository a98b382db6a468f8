//! The sandbox every command tool and stdio MCP server runs in (Linux).
//!
//! A tool's process is started through weft's launcher, `LAUNCHER [__sandbox] POLICY -- PROGRAM
//! ARGS...`, which sets the sandbox up and then `exec`s PROGRAM in the same process (same pid,
//! same process group, PROGRAM's own exit status); see `sandbox/launch.rs` for what it does, in
//! order. The launcher is the `weft` binary's hidden `__sandbox` subcommand (set with
//! [`set_launcher`]), else a `weft-sandbox` binary beside the running executable (or one
//! directory up, for test binaries in `deps/`).
//!
//! The policy ([`Policy`]) is the default (the system's runtime files, the agent file's
//! directory read-only, the tool's own workspace read-write, no network, rlimits) widened by
//! the tool's `sandbox:` key; `sandbox: none`, or `WEFT_SANDBOX=off` in weft's environment, runs
//! the tool without one (the launcher then only sets the parent-death signal, so that the tool
//! still dies with weft). A kernel without Landlock or user namespaces fails the call (kind
//! `sandbox`, rule `setup`) unless `WEFT_SANDBOX=off`.
//!
//! A tool that oversteps its sandbox fails with kind `sandbox`, its `detail.rule` inferred from
//! how it ended (`classify`).

#[cfg(target_os = "linux")]
pub mod launch;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::json;
use weft_core::ToolError;
use weft_core::sandbox::SandboxDecl;

/// The exit code of a launcher that could not set the sandbox up (its message on stderr starts
/// with [`SETUP_MARK`]).
pub const SETUP_EXIT: i32 = 125;
/// How the launcher's own error lines start.
pub const SETUP_MARK: &str = "weft-sandbox: ";
/// The word a setup error carries when the kernel lacks what the sandbox needs.
pub const UNSUPPORTED: &str = "unsupported";

/// Default limits.
const CPU_S: u64 = 60;
const MEMORY_MB: u64 = 1024;
const PROCESSES: u64 = 256;
const FILE_SIZE_MB: u64 = 1024;
const OPEN_FILES: u64 = 1024;

/// What the launcher enforces. `off` runs the program with only the parent-death signal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    /// No sandbox: only the parent-death signal.
    #[serde(default)]
    pub off: bool,
    /// Paths it may read and execute.
    #[serde(default)]
    pub read: Vec<PathBuf>,
    /// Paths it may read and write.
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// TCP ports it may connect to and bind; none means no IPv4/IPv6 sockets at all.
    #[serde(default)]
    pub ports: Vec<u16>,
    /// CPU seconds (none for long-lived MCP servers).
    #[serde(default)]
    pub cpu_s: Option<u64>,
    /// Data segment, MiB.
    #[serde(default)]
    pub memory_mb: u64,
    /// Processes.
    #[serde(default)]
    pub processes: u64,
    /// Largest file written, MiB.
    #[serde(default)]
    pub file_size_mb: u64,
    /// Open files.
    #[serde(default)]
    pub open_files: u64,
}

/// The system files any program needs to start and run (libraries, the loader's cache, users,
/// name resolution, certificates, time zones), read-only. Not `/etc/shadow` and the like.
const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ld.so.preload",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/resolv.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/python3",
    "/etc/python3.11",
    "/etc/python3.12",
    "/etc/python3.13",
    "/etc/perl",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/inputrc",
    "/etc/terminfo",
    "/etc/locale.alias",
    "/etc/default/locale",
    "/proc/self",
    "/proc/meminfo",
    "/proc/cpuinfo",
    "/proc/stat",
    "/proc/sys/kernel/random",
    "/proc/sys/vm/overcommit_memory",
    "/sys/devices/system/cpu",
];

/// Where language runtimes and their version managers install themselves under `$HOME`
/// (read-only): a `python3` on `PATH` is often a pyenv shim, a `node` nvm's. `$HOME` itself is
/// not readable.
const HOME_RUNTIMES: &[&str] = &[
    ".pyenv",
    ".nvm",
    ".asdf",
    ".local/share/mise",
    ".volta",
    ".rbenv",
    ".rustup",
    ".cargo/bin",
];

/// Devices a tool may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

impl Policy {
    /// The policy of a tool declared with `decl` in an agent file in `base_dir`, running
    /// `program` (its absolute path; `script` the file an interpreter runs) in `cwd` with
    /// `workspace` as its own directory; `None` for
    /// `sandbox: none`. `command` tools get a CPU limit, long-lived MCP servers do not.
    pub fn for_tool(
        decl: Option<&SandboxDecl>,
        base_dir: &Path,
        cwd: &Path,
        program: Option<&Path>,
        script: Option<&Path>,
        workspace: &Path,
        command: bool,
    ) -> Option<Self> {
        let rules = match decl {
            Some(SandboxDecl::Off) => return None,
            Some(SandboxDecl::Rules(r)) => r.clone(),
            None => Default::default(),
        };
        let base = absolute(base_dir);
        let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
        read.push(base.clone());
        read.push(absolute(cwd));
        let home = std::env::var_os("HOME").map(PathBuf::from);
        if let Some(h) = &home {
            read.extend(HOME_RUNTIMES.iter().map(|r| h.join(r)));
        }
        if let Some(p) = program {
            read.push(p.to_path_buf());
            // A program installed in a prefix (`VENV/bin/tool`, `PREFIX/bin/node`): the prefix,
            // where its libraries are; never `$HOME` or `/` themselves.
            if let Some(prefix) = p
                .parent()
                .filter(|d| d.file_name().is_some_and(|n| n == "bin"))
                .and_then(Path::parent)
                .filter(|d| d.parent().is_some() && Some(*d) != home.as_deref())
            {
                read.push(prefix.to_path_buf());
            }
            // A link (`/usr/bin/python3` -> `python3.12`, a virtual environment's python): the
            // file it leads to.
            if let Ok(real) = std::fs::canonicalize(p) {
                read.push(real);
            }
        }
        read.extend(script.map(Path::to_path_buf));
        read.extend(rules.read.iter().map(|r| base.join(r)));
        let mut write: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
        write.push(workspace.to_path_buf());
        write.extend(rules.write.iter().map(|w| base.join(w)));
        let l = &rules.limits;
        Some(Self {
            off: false,
            read,
            write,
            ports: rules.network.clone(),
            cpu_s: command.then(|| l.cpu_s.unwrap_or(CPU_S)),
            memory_mb: l.memory_mb.unwrap_or(MEMORY_MB),
            processes: l.processes.unwrap_or(PROCESSES),
            file_size_mb: l.file_size_mb.unwrap_or(FILE_SIZE_MB),
            open_files: l.open_files.unwrap_or(OPEN_FILES),
        })
    }

    /// No sandbox: only the parent-death signal.
    pub fn off() -> Self {
        Self {
            off: true,
            ..Default::default()
        }
    }
}

fn absolute(p: &Path) -> PathBuf {
    let p = if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    };
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The directory a tool of session `session` reads and writes (its `TMPDIR`), created.
pub fn workspace(session: &str) -> std::io::Result<PathBuf> {
    let name: String = session
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let dir = std::env::temp_dir()
        .join("weft-workspaces")
        .join(if name.is_empty() {
            "default".to_owned()
        } else {
            name
        });
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

static LAUNCHER: OnceLock<(PathBuf, Vec<OsString>)> = OnceLock::new();

/// Sets the launcher: `program` run with `lead` before the policy (the `weft` binary sets its
/// own path and `__sandbox`). The first call wins.
pub fn set_launcher(program: PathBuf, lead: Vec<OsString>) {
    let _ = LAUNCHER.set((program, lead));
}

/// The launcher: the one set, else `weft-sandbox` beside the running executable or one
/// directory up.
fn launcher() -> Option<(PathBuf, Vec<OsString>)> {
    // Off Linux there is no sandbox (and no launcher to set the parent-death signal).
    if !cfg!(target_os = "linux") {
        return None;
    }
    if let Some(l) = LAUNCHER.get() {
        return Some(l.clone());
    }
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let dir = exe.parent()?;
            [Some(dir), dir.parent()]
                .into_iter()
                .flatten()
                .map(|d| d.join("weft-sandbox"))
                .find(|p| crate::owned::executable(p))
        })
        .clone()
        .map(|p| (p, Vec::new()))
}

/// Whether `WEFT_SANDBOX=off` is set (said once, as a warning).
fn switched_off() -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    *OFF.get_or_init(|| {
        let off = std::env::var("WEFT_SANDBOX").is_ok_and(|v| v.eq_ignore_ascii_case("off"));
        if off {
            tracing::warn!(
                "WEFT_SANDBOX=off: command tools and MCP servers run without a sandbox (see docs/security.md)"
            );
        }
        off
    })
}

/// Warns once that the kernel lacks what the sandbox needs.
pub(crate) fn warn_unsupported(message: &str) {
    static SAID: OnceLock<()> = OnceLock::new();
    SAID.get_or_init(|| {
        tracing::warn!(
            "{message}; tools cannot run in a sandbox on this system and are refused (set WEFT_SANDBOX=off to run them without one)"
        );
    });
}

/// What to spawn for `program` (run in `cwd`, `path` its `PATH`) under `policy` (`None`: no
/// sandbox): the program, the arguments before the tool's own, and whether a sandbox is on.
/// A program that is not found is spawned as it is (the error is then weft's own and names it).
pub(crate) fn command(
    program: &str,
    cwd: &Path,
    path: Option<&OsStr>,
    policy: impl FnOnce(Option<&Path>) -> Option<Policy>,
) -> Result<(OsString, Vec<OsString>, bool), ToolError> {
    let resolved = crate::owned::resolve(program, cwd, path);
    let wanted = if switched_off() {
        None
    } else {
        policy(resolved.as_deref())
    };
    let Some(resolved) = resolved else {
        return Ok((program.into(), Vec::new(), false));
    };
    let Some((launcher, mut lead)) = launcher() else {
        if wanted.is_some() {
            return Err(ToolError::new(
                "sandbox",
                format!(
                    "cannot start `{program}` in a sandbox: no sandbox launcher (`weft-sandbox` beside {}); install it beside this program, or set WEFT_SANDBOX=off to run tools without a sandbox",
                    std::env::current_exe().map(|e| e.display().to_string()).unwrap_or_default()
                ),
            )
            .with_detail(json!({"rule": "setup"})));
        }
        tracing::debug!("no sandbox launcher: tool processes are not killed when weft is");
        return Ok((program.into(), Vec::new(), false));
    };
    let on = wanted.is_some();
    let policy = wanted.unwrap_or_else(Policy::off);
    lead.push(serde_json::to_string(&policy).unwrap_or_default().into());
    lead.push("--".into());
    lead.push(resolved.into_os_string());
    Ok((launcher.into_os_string(), lead, on))
}

/// What each command tool and stdio MCP server of `spec` may do, for `weft check`: the tool's
/// name, a line saying it, and whether it runs without a sandbox (`sandbox: none`).
pub fn summaries(spec: &weft_core::agent::AgentSpec) -> Vec<(String, String, bool)> {
    use weft_core::agent::ToolDecl;
    let Ok(decls) = spec.tool_decls() else {
        return Vec::new();
    };
    decls
        .iter()
        .filter_map(|d| match d {
            ToolDecl::Command(c) => Some((c.name.clone(), c.sandbox.clone(), true)),
            ToolDecl::Other { kind: "mcp", raw } => crate::mcp::McpServerDecl::parse(raw)
                .ok()
                .filter(|m| m.command.is_some())
                .map(|m| (format!("mcp server {}", m.name), m.sandbox, false)),
            _ => None,
        })
        .map(|(name, decl, command)| {
            let none = decl == Some(SandboxDecl::Off);
            (name, summary(decl.as_ref(), command), none)
        })
        .collect()
}

/// One line: what a tool with this `sandbox:` may do.
fn summary(decl: Option<&SandboxDecl>, command: bool) -> String {
    let rules = match decl {
        Some(SandboxDecl::Off) => {
            return "no sandbox (`sandbox: none`): it may do whatever weft's user may".into();
        }
        Some(SandboxDecl::Rules(r)) => r.clone(),
        None => Default::default(),
    };
    let list = |v: &[String]| {
        if v.is_empty() {
            String::new()
        } else {
            format!(", {}", v.join(", "))
        }
    };
    let l = &rules.limits;
    let network = if rules.network.is_empty() {
        "none".to_owned()
    } else {
        format!(
            "TCP ports {} (any host)",
            rules
                .network
                .iter()
                .map(u16::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let cpu = if command {
        format!("cpu {} s, ", l.cpu_s.unwrap_or(CPU_S))
    } else {
        String::new()
    };
    format!(
        "reads the system, the agent's directory{}; writes its workspace{}; network: {network}; limits: {cpu}memory {} MiB, {} processes, files up to {} MiB, {} open files",
        list(&rules.read),
        list(&rules.write),
        l.memory_mb.unwrap_or(MEMORY_MB),
        l.processes.unwrap_or(PROCESSES),
        l.file_size_mb.unwrap_or(FILE_SIZE_MB),
        l.open_files.unwrap_or(OPEN_FILES),
    )
}

/// How a process ended, for [`classify`].
pub(crate) struct Ended<'a> {
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Its stderr.
    pub stderr: &'a str,
}

/// The sandbox rule a failed process broke, if its end shows one: the launcher's own setup
/// failure, a limit's signal (or a shell's `128 + signal` exit code and its words for it), or an
/// error message on stderr (EACCES/EPERM from Landlock, the
/// address family refused by the seccomp filter, ENOMEM, EAGAIN on fork, EMFILE, EFBIG).
pub(crate) fn classify(tool: &str, ended: &Ended<'_>) -> Option<ToolError> {
    let err = ended.stderr;
    let has = |needles: &[&str]| {
        needles
            .iter()
            .any(|n| err.to_ascii_lowercase().contains(&n.to_ascii_lowercase()))
    };
    let line_with = |needles: &[&str]| {
        err.lines()
            .rev()
            .find(|l| needles.iter().any(|n| l.contains(n)))
            .map(|l| l.trim().to_owned())
    };
    let (rule, what) = if err.lines().any(|l| l.starts_with(SETUP_MARK)) {
        let line = line_with(&[SETUP_MARK]).unwrap_or_default();
        if line.contains(UNSUPPORTED) {
            warn_unsupported(&line);
        }
        (
            "setup",
            format!(
                "{line}; set WEFT_SANDBOX=off to run tools without a sandbox, or `sandbox: none` on this tool"
            ),
        )
    } else if ended.signal == Some(SIGXCPU)
        || ended.code == Some(128 + SIGXCPU)
        || has(&["CPU time limit exceeded"])
    {
        (
            "cpu",
            "used up its CPU time; to allow more add `sandbox: {limits: {cpu_s: SECONDS}}` to the tool".into(),
        )
    } else if ended.signal == Some(SIGXFSZ)
        || ended.code == Some(128 + SIGXFSZ)
        || has(&["File too large", "File size limit exceeded"])
    {
        (
            "file_size",
            "wrote a file past its size limit; to allow more add `sandbox: {limits: {file_size_mb: MIB}}` to the tool".into(),
        )
    } else if ended.signal == Some(SIGKILL)
        || ended.code == Some(128 + SIGKILL)
        || has(&[
            "MemoryError",
            "Cannot allocate memory",
            "out of memory",
            "bad_alloc",
            "memory allocation",
        ])
    {
        (
            "memory",
            "ran out of memory (or was killed); to allow more add `sandbox: {limits: {memory_mb: MIB}}` to the tool".into(),
        )
    } else if has(&["Too many open files"]) {
        (
            "open_files",
            "opened too many files; to allow more add `sandbox: {limits: {open_files: N}}` to the tool".into(),
        )
    } else if has(&[
        "fork: Resource temporarily unavailable",
        "Cannot fork",
        "can't fork",
        "BlockingIOError",
        "Resource temporarily unavailable",
    ]) {
        (
            "processes",
            "started too many processes; to allow more add `sandbox: {limits: {processes: N}}` to the tool".into(),
        )
    } else if has(&["Address family not supported"])
        || (has(&["Permission denied", "Operation not permitted"])
            && has(&["connect", "socket", "bind", "network", "Connection"]))
    {
        (
            "network",
            format!(
                "was refused the network ({}); to allow a TCP port add `sandbox: {{network: [PORT]}}` to the tool (ports, not hosts, are restricted)",
                line_with(&[
                    "Address family",
                    "Permission denied",
                    "Operation not permitted"
                ])
                .unwrap_or_default()
            ),
        )
    } else if has(&["Permission denied", "Operation not permitted"]) {
        let line = line_with(&["Permission denied", "Operation not permitted"]).unwrap_or_default();
        let rule = if line.contains("/proc/") {
            "proc"
        } else {
            "file"
        };
        (
            rule,
            format!(
                "was refused a file ({line}); to allow it add its path to `sandbox: {{read: [PATH]}}` (or `write:`) of the tool, relative to the agent file"
            ),
        )
    } else {
        return None;
    };
    Some(
        ToolError::new("sandbox", format!("`{tool}` broke its sandbox: {what}")).with_detail(
            json!({"rule": rule, "exit_code": ended.code, "signal": ended.signal, "stderr": err}),
        ),
    )
}

const SIGKILL: i32 = 9;
const SIGXCPU: i32 = 24;
const SIGXFSZ: i32 = 25;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn the_rule_is_told_by_how_the_tool_ended() {
        let rule = |code, signal, stderr| {
            classify(
                "t",
                &Ended {
                    code,
                    signal,
                    stderr,
                },
            )
            .map(|e| e.detail["rule"].as_str().unwrap_or_default().to_owned())
        };
        assert_eq!(rule(None, Some(SIGXCPU), "").as_deref(), Some("cpu"));
        assert_eq!(rule(None, Some(SIGXFSZ), "").as_deref(), Some("file_size"));
        assert_eq!(
            rule(Some(1), None, "cat: /root/.ssh/id_rsa: Permission denied").as_deref(),
            Some("file")
        );
        assert_eq!(
            rule(Some(1), None, "cat: /proc/1/environ: Permission denied").as_deref(),
            Some("proc")
        );
        assert_eq!(
            rule(
                Some(1),
                None,
                "OSError: [Errno 97] Address family not supported by protocol"
            )
            .as_deref(),
            Some("network")
        );
        assert_eq!(
            rule(
                Some(125),
                None,
                "weft-sandbox: setup: unsupported: no Landlock"
            )
            .as_deref(),
            Some("setup")
        );
        assert_eq!(rule(Some(1), None, "bad input"), None);
    }

    #[test]
    fn none_means_no_sandbox_and_the_default_is_narrow() {
        let ws = Path::new("/tmp/ws");
        assert_eq!(
            Policy::for_tool(
                Some(&SandboxDecl::Off),
                Path::new("/a"),
                Path::new("/a"),
                None,
                None,
                ws,
                true
            ),
            None
        );
        let p = Policy::for_tool(
            None,
            Path::new("/a"),
            Path::new("/a"),
            None,
            None,
            ws,
            false,
        )
        .unwrap();
        assert!(p.ports.is_empty() && p.cpu_s.is_none());
        assert!(
            !p.read
                .iter()
                .any(|r| r.starts_with("/etc/shadow") || r == Path::new("/proc"))
        );
        assert!(p.write.iter().any(|w| w == ws));
    }
}
