//! Link the `omnigraph` binary for a short-lived CLI process on Linux.
//!
//! - Position-dependent: Lance, DataFusion and Arrow make a ~300 MB binary
//!   with ~350,000 relative relocations; as a PIE, the dynamic loader applies
//!   them all before `main`, about 6 ms of every CLI process (measured:
//!   `omnigraph --version` 8.7 ms as a PIE, 2.6 ms without).
//! - In release builds, hot code first: `link/hot-symbols.txt` (written by
//!   `scripts/hot_symbols.sh`) lists the functions the everyday commands run,
//!   and the linker places them at the start of `.text`, so a command faults
//!   in a few contiguous megabytes of code instead of pages scattered over
//!   the whole binary. Names a build lacks are skipped silently.
//!
//! Only the binaries are linked this way; the library, tests and examples
//! keep the toolchain's defaults.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os != "linux" || env != "gnu" {
        return;
    }
    println!("cargo:rustc-link-arg-bins=-no-pie");
    let order =
        std::path::Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default()).join("link/hot-symbols.txt");
    if std::env::var("PROFILE").as_deref() != Ok("release") {
        return;
    }
    // Only a release build reads the list: regenerating it rebuilds no debug artifact.
    println!("cargo:rerun-if-changed={}", order.display());
    if order.is_file() {
        println!("cargo:rustc-link-arg-bins=-Wl,--symbol-ordering-file={}", order.display());
        println!("cargo:rustc-link-arg-bins=-Wl,--no-warn-symbol-ordering");
    }
}
