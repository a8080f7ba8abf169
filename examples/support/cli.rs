//! The release `omnigraph` binary beside the running benchmark.

use std::path::{Path, PathBuf};

/// `target/<profile>/omnigraph`; panics with the build command when absent.
pub fn cli_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("exe");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = dir.join("omnigraph");
    assert!(bin.exists(), "{} is missing: build it first (`cargo build --release`)", bin.display());
    bin
}

/// One finished CLI process: its wall time and its peak resident set size.
#[allow(dead_code)] // not every benchmark runs the CLI this way
pub struct CliRun {
    pub elapsed: std::time::Duration,
    /// The process's own `ru_maxrss` (KiB on Linux).
    pub peak_rss_kib: u64,
}

/// Set on the small measuring process [`run_measured`] starts.
const MEASURE_ENV: &str = "OMNIGRAPH_BENCH_MEASURE_CLI";

/// Run the release CLI with `args` to completion; panics with its stderr
/// when it fails.
///
/// A child's `ru_maxrss` starts from the RSS of the process it was forked
/// from, so a CLI process spawned by a benchmark holding graphs in memory
/// would report the benchmark's RSS. The CLI is therefore spawned by a fresh
/// copy of this benchmark that does nothing else ([`serve_measure_request`]).
#[allow(dead_code)] // not every benchmark runs the CLI this way
pub fn run_measured(args: &[&str]) -> CliRun {
    let exe = std::env::current_exe().expect("exe");
    let out = std::process::Command::new(exe).env(MEASURE_ENV, "1").args(args).output().expect("run the measurer");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "omnigraph {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().expect("measurer output"));
    let (nanos, rss) = (fields.next().expect("elapsed"), fields.next().expect("rss"));
    CliRun { elapsed: std::time::Duration::from_nanos(nanos), peak_rss_kib: rss }
}

/// In the measuring process (a benchmark's first call in `main`): run the CLI
/// with this process's arguments, print `<elapsed ns> <peak RSS KiB>`, exit
/// with its status. Returns at once in a normal benchmark process.
#[allow(dead_code)] // not every benchmark runs the CLI this way
pub fn serve_measure_request() {
    use std::process::{Command, Stdio};
    if std::env::var_os(MEASURE_ENV).is_none() {
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let start = std::time::Instant::now();
    let child = Command::new(cli_binary())
        .args(&args)
        .env_remove(MEASURE_ENV)
        .stdout(Stdio::null())
        // Straight to the benchmark, which reads it while we wait: a pipe
        // read only after `wait4` could fill and stall the CLI.
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run omnigraph");
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is valid; `wait4` fills it for our own child.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = child.id() as libc::pid_t;
    // SAFETY: `pid` is our unreaped child; the pointers outlive the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let elapsed = start.elapsed();
    if reaped != pid || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        std::process::exit(1);
    }
    println!("{} {}", elapsed.as_nanos(), usage.ru_maxrss.max(0));
    std::process::exit(0);
}
