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
//! place (e.g. a real disk, to time it).

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
        if writable { shm } else { std::env::temp_dir() }
    })
}

/// A fresh scratch directory, removed when dropped.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("omnigraph-test")
        .tempdir_in(root())
        .unwrap_or_else(|e| panic!("scratch directory in {}: {e}", root().display()))
}
