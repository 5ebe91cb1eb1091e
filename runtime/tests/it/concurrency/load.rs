//! Many threads, mixed sizes and both input kinds: every result once and matching; a
//! full queue keeps memory bounded and `try_submit` reports it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ndarray::Axis;
use segtool_runtime::batching::{BatchConfig, Handle, Input};
use segtool_runtime::expert::normalise;

use super::{expected_mask, image, server, size_of, spec, Probe};

#[test]
fn eight_threads_mixed_sizes_every_result_once_and_matching() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 500;
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(8)
        .with_max_wait(Duration::from_millis(2))
        .with_queue_capacity(64);
    let server = server(&probe, config, 2, 300, Duration::ZERO);
    let start = Instant::now();
    let server_ids: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                s.spawn(move || {
                    let spec = spec();
                    let handles: Vec<(usize, Handle)> = (0..PER_THREAD)
                        .map(|i| {
                            let id = t * PER_THREAD + i;
                            let img = image(id, size_of(id));
                            // Thread 7 sends already-normalised tensors, and every 5th
                            // request of thread 6 too, so batches mix both kinds.
                            let input: Input = if t == 7 || (t == 6 && i % 5 == 0) {
                                normalise(&img, &spec).index_axis_move(Axis(0), 0).into()
                            } else {
                                img.into()
                            };
                            (id, server.submit(input))
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|(id, h)| {
                            let out = h.wait().unwrap_or_else(|e| panic!("request {id}: {e}"));
                            assert_eq!(out.mask, expected_mask(id, size_of(id)), "request {id}");
                            assert!(out.logits.is_none());
                            let served = out.served.expect("a server's answer");
                            assert!(served.batch_size >= 1 && served.batch_size <= 8);
                            served.id
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let total = THREADS * PER_THREAD;
    let stats = server.stats();
    eprintln!("{total} requests in {:?}: {stats:#?}", start.elapsed());
    assert_eq!(server_ids.len(), total);
    assert_eq!(
        server_ids.iter().collect::<HashSet<_>>().len(),
        total,
        "ids unique"
    );
    assert_eq!(probe.mixed.load(Ordering::SeqCst), 0, "a batch mixed sizes");
    // Every request ran exactly once: no retries, no duplicates, nothing lost.
    assert_eq!(probe.images.load(Ordering::SeqCst), total);
    let mut done = probe.completed.lock().unwrap().clone();
    done.sort_unstable();
    assert_eq!(done, (0..total).collect::<Vec<_>>());
    assert_eq!(stats.requests(), total as u64);
    assert_eq!(stats.submitted, total as u64);
    assert_eq!(stats.batches(), probe.runs.load(Ordering::SeqCst) as u64);
    assert!(stats
        .workers
        .iter()
        .all(|w| w.failed_batches == 0 && w.errors == 0));
    assert!(probe.max_n.load(Ordering::SeqCst) <= 8);
    assert!(stats.mean_batch_size() > 1.0, "no batching: {stats:?}");
    assert!(
        stats.workers.iter().all(|w| w.batches > 0),
        "a worker idled"
    );
    assert_eq!((stats.queued, stats.in_batches), (0, 0));
    assert!(stats.peak_alive <= 64 + 2 * 8);
}

#[test]
fn memory_stays_bounded_and_try_submit_reports_queue_full() {
    const CAPACITY: usize = 8;
    const MAX_BATCH: usize = 4;
    const WORKERS: usize = 2;
    const BOUND: usize = CAPACITY + WORKERS * MAX_BATCH;
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(MAX_BATCH)
        .with_max_wait(Duration::from_millis(1))
        .with_queue_capacity(CAPACITY);

    // Held engines: accept with try_submit until the server is full.
    {
        let server = server(&probe, config.clone(), WORKERS, 0, Duration::ZERO);
        probe.set_open(false);
        let mut handles = Vec::new();
        let full = loop {
            match server.try_submit(image(handles.len(), 0)) {
                Ok(h) => handles.push(h),
                Err(full) => break full,
            }
            assert!(handles.len() <= BOUND, "accepted more than the bound");
            // Let workers take what they can, so that the bound is reached exactly.
            std::thread::sleep(Duration::from_millis(2));
        };
        let given_back = full.into_input();
        assert_eq!(given_back.size(), (6, 5), "the request is given back");
        let stats = server.stats();
        assert_eq!(stats.queued, CAPACITY);
        assert!(stats.alive() <= BOUND && stats.rejected == 1, "{stats:?}");
        probe.set_open(true);
        for (id, h) in handles.into_iter().enumerate() {
            assert_eq!(h.wait().unwrap().mask, expected_mask(id, 0));
        }
    }

    // Slow engines, fast submitters: the queue stays full, memory stays bounded.
    let server = server(&probe, config, WORKERS, 0, Duration::from_millis(4));
    let rejected = AtomicUsize::new(0);
    let max_alive = AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let monitor = s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                max_alive.fetch_max(server.stats().alive(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let submitters: Vec<_> = (0..6)
            .map(|t| {
                let (server, rejected) = (&server, &rejected);
                s.spawn(move || {
                    let mut handles = Vec::new();
                    for i in 0..40 {
                        let id = t * 40 + i;
                        let code = size_of(id);
                        if t == 0 {
                            // A "drop frames when busy" producer.
                            match server.try_submit(image(id, code)) {
                                Ok(h) => handles.push((id, code, h)),
                                Err(_) => {
                                    rejected.fetch_add(1, Ordering::SeqCst);
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                            }
                        } else {
                            handles.push((id, code, server.submit(image(id, code))));
                        }
                    }
                    for (id, code, h) in handles {
                        assert_eq!(h.wait().unwrap().mask, expected_mask(id, code));
                    }
                })
            })
            .collect();
        for t in submitters {
            t.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        monitor.join().unwrap();
    });
    let stats = server.stats();
    eprintln!("bounded: {stats:#?}");
    assert!(
        stats.peak_alive <= BOUND,
        "peak {} > {BOUND}",
        stats.peak_alive
    );
    assert!(max_alive.load(Ordering::SeqCst) <= BOUND);
    assert!(
        stats.peak_alive >= CAPACITY,
        "the queue never filled: {stats:?}"
    );
    assert!(
        rejected.load(Ordering::SeqCst) > 0,
        "try_submit never saw QueueFull"
    );
    assert_eq!(stats.rejected, rejected.load(Ordering::SeqCst) as u64);
    assert!(probe.max_n.load(Ordering::SeqCst) <= MAX_BATCH);
}
