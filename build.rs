//! Link the `omnigraph` binary as a position-dependent executable on Linux.
//!
//! Lance, DataFusion and Arrow make a ~300 MB binary with ~350,000 relative
//! relocations: as a PIE, the dynamic loader applies them all before `main`,
//! about 6 ms of every CLI process (measured: `omnigraph --version` 8.7 ms
//! as a PIE, 2.6 ms without). A one-shot command pays that on every call.
//! Only the binaries are linked this way; the library, tests and examples
//! keep the toolchain's defaults.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
