//! The helper's work (`pen __sandbox-exec`): confine this fresh, single-threaded process, then
//! exec the command. Each step fails loudly; the command never runs half-confined.

use super::{DEVICES, Policy};
use landlock::{
    ABI, Access, AccessFs, Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
    path_beneath_rules,
};
use std::convert::Infallible;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;

/// The Landlock ABI whose rights are handled: 5 (Linux 6.10: file truncation and device
/// ioctls are refused outside the writable paths too). At least ABI 3 is required.
const HANDLED_ABI: ABI = ABI::V5;
const MIN_ABI: i64 = 3;

/// Confines this process by `policy` and execs `program` (never returns on success).
pub fn confine_and_exec(policy: &Policy, program: &[OsString]) -> Result<Infallible, String> {
    let abi = landlock_abi();
    if abi < MIN_ABI {
        return Err(format!(
            "the kernel's Landlock ABI is {abi} (Landlock off or missing); {MIN_ABI} or later is needed"
        ));
    }
    // SAFETY: getuid/getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
    if !policy.network {
        flags |= libc::CLONE_NEWNET;
    }
    // SAFETY: unshare(2) of a single-threaded process.
    if unsafe { libc::unshare(flags) } != 0 {
        return Err(format!(
            "cannot create the user, mount and network namespaces: {}",
            std::io::Error::last_os_error()
        ));
    }
    // The same ids inside as outside: files keep their owner, and nothing is gained.
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &format!("{uid} {uid} 1"))?;
    write_proc("/proc/self/gid_map", &format!("{gid} {gid} 1"))?;
    mount(None, Path::new("/"), libc::MS_REC | libc::MS_PRIVATE)?;
    for path in &policy.read_only {
        bind_read_only(path)?;
    }
    if !policy.network {
        loopback_up();
    }
    drop_privileges()?;
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(HANDLED_ABI))
        .and_then(|r| r.scope(Scope::Signal))
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_read(HANDLED_ABI))))
        .and_then(|r| {
            r.add_rules(path_beneath_rules(
                &policy.writable,
                AccessFs::from_all(HANDLED_ABI),
            ))
        })
        .and_then(|r| r.add_rules(path_beneath_rules(DEVICES, AccessFs::from_all(HANDLED_ABI))))
        .and_then(|r| r.restrict_self())
        .map_err(|e| format!("cannot apply the Landlock rules: {e}"))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err("the kernel did not enforce the Landlock rules".to_string());
    }
    let Some((name, args)) = program.split_first() else {
        return Err("no program to run".to_string());
    };
    let err = std::process::Command::new(name).args(args).exec();
    Err(format!("cannot run {}: {err}", name.to_string_lossy()))
}

/// The kernel's Landlock ABI version (0 when it has none).
fn landlock_abi() -> i64 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: landlock_create_ruleset(NULL, 0, VERSION) only returns the ABI version.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    version.max(0)
}

fn write_proc(path: &str, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {path}: {e}"))
}

fn c_path(path: &Path) -> Result<CString, String> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} holds a NUL byte", path.display()))
}

fn mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> Result<(), String> {
    let target_c = c_path(target)?;
    let source_c = source.map(c_path).transpose()?;
    // SAFETY: mount(2) with valid NUL-terminated paths or NULL.
    let done = unsafe {
        libc::mount(
            source_c.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target_c.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if done != 0 {
        return Err(format!(
            "cannot mount {}: {}",
            target.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Makes `path` read-only in this mount namespace: a bind mount of itself, remounted
/// read-only with the flags the mount under it has (a user namespace may not clear them).
/// A repository's missing `.git/hooks` is made first, so no hook can be created in it.
fn bind_read_only(path: &Path) -> Result<(), String> {
    if path.ends_with(".git/hooks") && std::fs::symlink_metadata(path).is_err() {
        std::fs::create_dir(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    }
    mount(Some(path), path, libc::MS_BIND | libc::MS_REC)?;
    let target = c_path(path)?;
    // SAFETY: statvfs(3) with a valid path and a zeroed out-struct.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(target.as_ptr(), &mut stat) } != 0 {
        return Err(format!(
            "cannot stat {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    let mut flags = libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY;
    for (st, ms) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if stat.f_flag & st != 0 {
            flags |= ms;
        }
    }
    mount(None, path, flags)
}

/// Brings the new network namespace's loopback up, so a command may talk to itself; the
/// host's network (its 127.0.0.1 included) stays out of reach. Best effort: a loopback left
/// down only refuses more.
fn loopback_up() {
    // SAFETY: a datagram socket for the interface ioctls, closed below; `req` is a zeroed
    // ifreq naming "lo".
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return;
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
            *slot = *byte as libc::c_char;
        }
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        libc::close(fd);
    }
}

/// Gives up every capability the user namespace granted (the bounding set too, so an exec
/// as uid 0 gains none back) and sets `PR_SET_NO_NEW_PRIVS`, so no setuid program raises
/// privileges.
fn drop_privileges() -> Result<(), String> {
    // SAFETY: prctl(2) calls on this process.
    unsafe {
        let mut cap = 0;
        while libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 {
            cap += 1;
        }
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(format!(
                "cannot set no_new_privs: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    // The effective, permitted and inheritable sets, emptied.
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset(2) with a v3 header and its two data structs.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(format!(
            "cannot drop capabilities: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
