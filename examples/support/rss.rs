//! Resident set size of the benchmark process (Linux `/proc`).

/// A `/proc/self/status` field in KiB (0 when unreadable).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Peak resident set size of this process since the last reset, in KiB.
pub fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

/// Resident set size of this process now, in KiB.
#[allow(dead_code)] // not every benchmark reports it
pub fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// Reset the peak RSS to the current RSS (Linux `clear_refs` 5).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
