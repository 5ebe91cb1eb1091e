//! Handing the heap's freed memory back to the system (glibc's `malloc_trim`; a no-op
//! elsewhere).
//!
//! glibc keeps freed memory for reuse: the top of each heap above its trim threshold, and
//! the free pages inside every arena not at all. A long-running live path (the ROS 2 node,
//! the GStreamer element) goes through bursts, a backlog after a stall or a reallocation
//! of its frame buffers, and without a trim its RSS stays at the high-water mark of the
//! worst burst, or creeps with the fragmentation of many threads' arenas, for as long as
//! the process lives. Trimming is process-wide (the allocator is), so
//! [`release_freed_heap_every`] trims once per period however many callers a process has.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// `malloc_trim(0)`: the free tops of the heaps and (glibc 2.8 on) the whole free pages
/// inside every arena, back to the kernel. What it gives back is faulted in again the next
/// time it is used, once.
pub fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator; no pointers change.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// [`release_freed_heap`] if no caller in this process did so in the last `period`
/// (counted from the first call); true when this call trimmed.
pub fn release_freed_heap_every(period: Duration) -> bool {
    static START: OnceLock<Instant> = OnceLock::new();
    static LAST_MS: AtomicU64 = AtomicU64::new(0);
    let now_ms = START.get_or_init(Instant::now).elapsed().as_millis() as u64;
    let last = LAST_MS.load(Ordering::Relaxed);
    if now_ms.saturating_sub(last) < period.as_millis() as u64 {
        return false;
    }
    // One winner per period when several threads arrive together.
    if LAST_MS
        .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
        .is_err()
    {
        return false;
    }
    release_freed_heap();
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_per_period_across_threads() {
        let period = Duration::from_millis(200);
        assert!(
            !release_freed_heap_every(period),
            "not before a period has passed"
        );
        std::thread::sleep(Duration::from_millis(250));
        let trimmed: usize = (0..4)
            .map(|_| std::thread::spawn(move || release_freed_heap_every(period)))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap() as usize)
            .sum();
        assert_eq!(trimmed, 1, "one of the four threads trims");
        assert!(!release_freed_heap_every(period));
    }
}
