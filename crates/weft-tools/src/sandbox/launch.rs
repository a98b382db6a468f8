//! The launcher: `[__sandbox] POLICY -- PROGRAM ARGS...` sets the sandbox up in its own
//! process, then `exec`s PROGRAM (same pid). It must run single-threaded (a user namespace
//! cannot be entered by a process with threads): the `weft` binary dispatches `__sandbox`
//! before anything else starts.
//!
//! In order:
//! 1. a new user namespace, the current uid and gid mapped to themselves;
//! 2. `PR_SET_PDEATHSIG(SIGKILL)` (set after the namespace, whose new credentials clear it), so
//!    that the tool dies with weft;
//! 3. rlimits: CPU (command tools), data segment (memory; `RLIMIT_DATA`, not `RLIMIT_AS`, which
//!    V8 and other runtimes that reserve address space cannot start under), processes, file
//!    size, open files;
//! 4. Landlock: the filesystem rules, TCP bind/connect port rules (ABI 4), signal and
//!    abstract-unix-socket scoping (ABI 6), each where the kernel has it; a kernel without
//!    Landlock is refused;
//! 5. a seccomp filter: no AF_INET/AF_INET6 sockets unless the policy lists ports, no
//!    `io_uring_setup` (io_uring bypasses the checks above);
//! 6. `exec`.
//!
//! Any failure exits with [`super::SETUP_EXIT`] and a line starting with [`super::SETUP_MARK`].

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::ExitCode;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::sys::resource::{Resource, setrlimit};
use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::{Policy, SETUP_EXIT, SETUP_MARK, UNSUPPORTED};

/// Runs the launcher with its arguments (after `__sandbox`, or the binary's name); returns only
/// when it fails.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let mut args = args.into_iter();
    let policy = args.next();
    let dashes = args.next();
    let (Some(policy), Some(_)) = (policy, dashes.filter(|d| d == "--")) else {
        return fail("usage: weft-sandbox POLICY-JSON -- PROGRAM [ARGS...]");
    };
    let policy: Policy = match serde_json::from_str(&policy.to_string_lossy()) {
        Ok(p) => p,
        Err(e) => return fail(&format!("setup: the policy is not valid: {e}")),
    };
    let Some(program) = args.next() else {
        return fail("usage: weft-sandbox POLICY-JSON -- PROGRAM [ARGS...]");
    };
    if let Err(e) = enter(&policy) {
        return fail(&format!("setup: {e}"));
    }
    let e = std::process::Command::new(&program).args(args).exec();
    eprintln!("{SETUP_MARK}exec {}: {e}", Path::new(&program).display());
    ExitCode::from(127)
}

fn fail(m: &str) -> ExitCode {
    eprintln!("{SETUP_MARK}{m}");
    ExitCode::from(SETUP_EXIT as u8)
}

fn enter(p: &Policy) -> Result<(), String> {
    let parent = nix::unistd::getppid();
    if !p.off {
        user_namespace()?;
    }
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("PR_SET_PDEATHSIG: {e}"))?;
    // The parent died before the signal was set: nothing would kill us later.
    if nix::unistd::getppid() != parent {
        return Err("the parent process is gone".into());
    }
    if p.off {
        return Ok(());
    }
    limits(p)?;
    landlock(p)?;
    seccomp(p)
}

fn user_namespace() -> Result<(), String> {
    let uid = nix::unistd::getuid();
    let gid = nix::unistd::getgid();
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| format!("{UNSUPPORTED}: cannot enter a user namespace: {e}"))?;
    let write = |file: &str, text: String| {
        std::fs::write(file, text).map_err(|e| format!("writing {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1"))
}

fn limits(p: &Policy) -> Result<(), String> {
    const MIB: u64 = 1024 * 1024;
    let set = |r: Resource, soft: u64, hard: u64, name: &str| {
        setrlimit(r, soft, hard).map_err(|e| format!("setting the {name} limit: {e}"))
    };
    if let Some(cpu) = p.cpu_s {
        // SIGXCPU at the soft limit, SIGKILL a second later.
        set(Resource::RLIMIT_CPU, cpu, cpu + 1, "CPU")?;
    }
    let mem = p.memory_mb.saturating_mul(MIB);
    set(Resource::RLIMIT_DATA, mem, mem, "memory")?;
    set(Resource::RLIMIT_NPROC, p.processes, p.processes, "process")?;
    let fsize = p.file_size_mb.saturating_mul(MIB);
    set(Resource::RLIMIT_FSIZE, fsize, fsize, "file size")?;
    set(
        Resource::RLIMIT_NOFILE,
        p.open_files,
        p.open_files,
        "open files",
    )?;
    Ok(())
}

fn landlock(p: &Policy) -> Result<(), String> {
    let abi = ABI::V6;
    let e = |e: landlock::RulesetError| format!("Landlock: {e}");
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(e)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(e)?
        .scope(Scope::from_all(abi))
        .map_err(e)?
        .create()
        .map_err(e)?;
    let rules = p
        .read
        .iter()
        .map(|r| (r, AccessFs::from_read(abi)))
        .chain(p.write.iter().map(|w| (w, AccessFs::from_all(abi))));
    for (path, access) in rules {
        // A path that does not exist (yet) is left out.
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = if meta.is_dir() {
            access
        } else {
            access & AccessFs::from_file(abi)
        };
        rs = rs.add_rule(PathBeneath::new(fd, access)).map_err(e)?;
    }
    for port in &p.ports {
        rs = rs
            .add_rule(NetPort::new(
                *port,
                AccessNet::BindTcp | AccessNet::ConnectTcp,
            ))
            .map_err(e)?;
    }
    let status = rs.restrict_self().map_err(e)?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(format!(
            "{UNSUPPORTED}: this kernel has no Landlock (Linux 5.13 or later with Landlock enabled, `lsm=landlock,...`)"
        ));
    }
    Ok(())
}

fn seccomp(p: &Policy) -> Result<(), String> {
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("seccomp: {e:?}"))?;
    let e = |e: seccompiler::BackendError| format!("seccomp: {e}");
    let apply = |rules: BTreeMap<i64, Vec<SeccompRule>>, errno: i32| -> Result<(), String> {
        let filter = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .map_err(e)?;
        let bpf: seccompiler::BpfProgram = filter.try_into().map_err(e)?;
        seccompiler::apply_filter(&bpf).map_err(|e| format!("seccomp: {e}"))
    };
    // io_uring does file and network operations that Landlock and this filter do not see.
    apply(
        BTreeMap::from([(libc::SYS_io_uring_setup, Vec::new())]),
        libc::EPERM,
    )?;
    if p.ports.is_empty() {
        let family = |f: i32| {
            SeccompCondition::new(0, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, f as u64)
                .and_then(|c| SeccompRule::new(vec![c]))
                .map_err(e)
        };
        apply(
            BTreeMap::from([(
                libc::SYS_socket,
                vec![family(libc::AF_INET)?, family(libc::AF_INET6)?],
            )]),
            libc::EAFNOSUPPORT,
        )?;
    }
    Ok(())
}
