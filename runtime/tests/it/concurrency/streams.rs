//! Ordered streams: results in submission order, from a producer thread or a
//! single-thread loop.

use std::time::Duration;

use image::RgbImage;
use segtool_runtime::batching::{BatchConfig, BatchError, Input, OrderedStream};

use super::{expected_mask, image, server, size_of, Probe};

/// Frames of mixed sizes: same-size bucketing alone already reorders completions.
fn frame(i: usize) -> RgbImage {
    image(i, size_of(i))
}

fn check_frame(i: usize, out: std::result::Result<segtool_runtime::Segmentation, BatchError>) {
    let out = out.unwrap_or_else(|e| panic!("frame {i}: {e}"));
    assert_eq!(out.served.and_then(|s| s.frame), Some(i as u64));
    assert_eq!(out.mask, expected_mask(i, size_of(i)), "frame {i}");
}

#[test]
fn ordered_stream_returns_300_frames_in_order() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(4)
        .with_max_wait(Duration::from_millis(1))
        .with_queue_capacity(16);
    let server = server(&probe, config, 2, 2000, Duration::ZERO);
    let stream: OrderedStream = server.ordered_stream(24);
    let mut seen = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..300 {
                assert_eq!(stream.push(frame(i)), i as u64);
                assert!(stream.in_flight() <= 24);
            }
            stream.finish();
        });
        while let Some(out) = stream.next() {
            check_frame(seen, out);
            seen += 1;
        }
    });
    assert_eq!(seen, 300);
    let completed = probe.completed.lock().unwrap().clone();
    assert_eq!(completed.len(), 300);
    assert!(
        completed.windows(2).any(|w| w[0] > w[1]),
        "completion order never varied; the test proves nothing"
    );
    assert!(stream.next().is_none());
}

#[test]
fn ordered_stream_in_a_single_thread_loop() {
    let probe = Probe::new();
    let config = BatchConfig::new().with_max_batch(4).with_queue_capacity(4);
    let server = server(&probe, config, 2, 1000, Duration::ZERO);
    let stream = server.ordered_stream(6);
    let mut seen = 0;
    for i in 0..60 {
        let mut input: Input = frame(i).into();
        loop {
            match stream.try_push(input) {
                Ok(index) => {
                    assert_eq!(index, i as u64);
                    break;
                }
                Err(full) => {
                    // Window or queue full: wait for the oldest result to make room.
                    input = full.into_input();
                    if let Some(out) = stream.next() {
                        check_frame(seen, out);
                        seen += 1;
                    }
                }
            }
        }
        while let Some(out) = stream.try_next() {
            check_frame(seen, out);
            seen += 1;
        }
    }
    stream.finish();
    while let Some(out) = stream.next() {
        check_frame(seen, out);
        seen += 1;
    }
    assert_eq!(seen, 60);
}
