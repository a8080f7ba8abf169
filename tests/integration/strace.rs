//! Running a CLI process under `strace` and reading its trace: the syscall
//! tests (durability, listings) share these.

use std::collections::HashMap;
use std::process::Command;

/// Whether `strace` runs here; when CI requires it, its absence fails.
pub(crate) fn strace_available() -> bool {
    let ok = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        assert!(std::env::var_os("OMNIGRAPH_TEST_STRACE_REQUIRED").is_none(), "strace is required but missing");
        eprintln!("strace is not available: skipping the traced test");
    }
    ok
}

/// The trace's calls, each on one line: with `-f` a call another thread
/// interrupts is split into `<unfinished ...>` and `<... resumed>` halves.
pub(crate) fn joined(text: &str) -> Vec<String> {
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut calls = Vec::new();
    for line in text.lines() {
        // `PID  call`: strace pads short process ids with spaces.
        let (pid, rest) = line.split_once(' ').map_or(("", line), |(pid, rest)| (pid, rest.trim_start()));
        if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_string(), head.to_string());
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let tail = tail.split_once(" resumed>").map_or(tail, |(_, t)| t);
            calls.push(format!("{}{tail}", pending.remove(pid).unwrap_or_default()));
        } else {
            calls.push(rest.to_string());
        }
    }
    calls
}

/// The path `-y` shows for a call's first (file descriptor) argument.
pub(crate) fn fd_path(call: &str) -> Option<String> {
    let start = call.find('<')? + 1;
    let end = start + call[start..].find('>')?;
    Some(call[start..end].to_string())
}
