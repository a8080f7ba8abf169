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
