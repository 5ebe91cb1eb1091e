//! This process's memory figures, read from Linux's `/proc/self/status`: the peak RSS that
//! `segtool infer` reports and the benchmark examples print.

/// The `/proc/self/status` field `field` (`"VmHWM"`: peak resident set, `"VmRSS"`: current)
/// in KiB; `None` off Linux or when the field is missing.
pub fn memory_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn reads_fields_and_unknown_fields_are_none() {
        // (VmHWM is updated lazily by the kernel, so it may trail VmRSS for a moment.)
        let peak = super::memory_kib("VmHWM").unwrap();
        let now = super::memory_kib("VmRSS").unwrap();
        assert!(now > 0 && peak > 0, "VmHWM {peak} VmRSS {now}");
        // A prefix of a field is not that field.
        assert_eq!(super::memory_kib("VmHW"), None);
        assert_eq!(super::memory_kib("NoSuchField"), None);
    }
}
