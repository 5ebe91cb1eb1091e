//! The raw-frame source of `segtool infer --raw WxH`: packed rgb24 frames read from
//! stdin, batched and prepared on the source thread, with frame buffers recycled from the
//! writer. Separate from the file source because stdin framing has its own failure modes
//! (a truncated last frame, a wrong `--raw` size) and buffer reuse.

use std::io::Read;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Instant;

use anyhow::Result;
use image::RgbImage;

use super::pipeline::{send_batch, Batch, Busy, Prepare};

/// Fills `buf` from `input`; returns the bytes read (less than `buf.len()` only at EOF).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

pub(super) fn read_raw(
    w: u32,
    h: u32,
    batch_size: usize,
    prepare: &Prepare,
    tx: SyncSender<Result<(Batch, Busy)>>,
    recycle: Receiver<Vec<u8>>,
) {
    let frame_bytes = w as usize * h as usize * 3;
    let mut stdin = std::io::stdin().lock();
    let mut index = 0u64;
    loop {
        let t0 = Instant::now();
        let mut images = Vec::with_capacity(batch_size);
        let mut names = Vec::with_capacity(batch_size);
        let mut failure = None;
        let mut eof = false;
        while images.len() < batch_size {
            let mut buf = recycle.try_recv().unwrap_or_default();
            buf.resize(frame_bytes, 0);
            match read_full(&mut stdin, &mut buf) {
                Ok(n) if n == frame_bytes => {
                    images.push(RgbImage::from_raw(w, h, buf).expect("buffer sized for frame"));
                    names.push(format!("frame_{index:06}"));
                    index += 1;
                }
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => {
                    failure = Some(anyhow::anyhow!(
                        "stdin ended inside frame {index}: {n} of {frame_bytes} bytes \
                         ({} bytes in all, not a multiple of the --raw {w}x{h} rgb24 frame \
                         size {w}*{h}*3 = {frame_bytes}; wrong --raw size or pixel format?)",
                        index * frame_bytes as u64 + n as u64
                    ));
                    break;
                }
                Err(e) => {
                    failure = Some(
                        anyhow::Error::new(e).context(format!("reading frame {index} from stdin")),
                    );
                    break;
                }
            }
        }
        let read = t0.elapsed();
        if !images.is_empty() && !send_batch(&tx, names, images, Vec::new(), prepare, read) {
            return;
        }
        if let Some(e) = failure {
            let _ = tx.send(Err(e));
            return;
        }
        if eof {
            return;
        }
    }
}
