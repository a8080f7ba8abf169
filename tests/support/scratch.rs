//! Where tests put their graphs: a RAM-backed directory when the machine
//! has one, so a suite of thousands of small commits measures the code and
//! not the disk.
//!
//! Local graphs sync every file and directory entry they write (durability
//! `fsync`, the default). On tmpfs every one of those calls is still made,
//! through the same code, but costs nothing; on a virtual disk each one can
//! cost milliseconds, which made the suite's time follow the machine's disk.
//! That the calls are made, in the right order, is proved where it matters
//! without a disk: the strace test of a CLI write
//! (tests/integration/durability.rs) and the power-loss suite
//! (tests/crash/power_loss.rs). `OMNIGRAPH_TEST_TMPDIR` picks another
//! place (e.g. a real disk, to time it); a /dev/shm with less than
//! [`MIN_FREE`] free is passed over.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The directory test scratch directories are made in.
pub fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        if let Some(dir) = std::env::var_os("OMNIGRAPH_TEST_TMPDIR") {
            return PathBuf::from(dir);
        }
        let shm = PathBuf::from("/dev/shm");
        let writable = tempfile::Builder::new().prefix("omnigraph-probe").tempdir_in(&shm).is_ok();
        // A container's default /dev/shm (64 MiB) is too small for the suite.
        if writable && free_bytes(&shm).is_some_and(|b| b >= MIN_FREE) { shm } else { std::env::temp_dir() }
    })
}

/// Free space a RAM-backed directory needs to hold the suite's graphs.
const MIN_FREE: u64 = 2 << 30;

/// Bytes available to this user on the filesystem holding `path`.
fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` only writes the struct it is given, which is plain
    // data and zeroed first; the path is NUL-terminated and outlives the call.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) } == 0;
    // Both are 64-bit on the 64-bit Linux the suite runs on.
    let (blocks, block_size): (u64, u64) = (stats.f_bavail, stats.f_frsize);
    ok.then(|| blocks.saturating_mul(block_size))
}

/// A fresh scratch directory, removed when dropped.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("omnigraph-test")
        .tempdir_in(root())
        .unwrap_or_else(|e| panic!("scratch directory in {}: {e}", root().display()))
}
