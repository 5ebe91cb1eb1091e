//! Images: the input is one selector byte, then a whole PNG or JPEG file.
//!
//! Selector bit 0: the file's extension, `.png` or `.jpg` (the readers pick the decoder
//! by it, as `image::open` does); bit 1: `dataset::read_rgb` (every image segtool infers,
//! evaluates, calibrates or trains on) or `dataset::read_mask` (label masks: palette and
//! low-bit-depth PNGs read as raw indices by the `png` crate, anything else through
//! `image`). Both refuse headers over `MAX_DECODED_BYTES` themselves.
//!
//! Refuses (returns at once) a header that declares more than 16 MiB of pixels: the
//! library accepts up to 512 MiB, and decoding that much per input would leave the fuzzer
//! a few executions a second.

use std::io::Cursor;

const MAX_FUZZ_DECODED: u64 = 16 << 20;

pub fn run(data: &[u8]) {
    let Some((&selector, file)) = data.split_first() else {
        return;
    };
    if declared_bytes(file).is_some_and(|b| b > MAX_FUZZ_DECODED) {
        return;
    }
    let ext = if selector & 1 == 0 { "png" } else { "jpg" };
    let path = super::support::write(&format!("i.{ext}"), file);
    if selector & 2 == 0 {
        let _ = segtool_core::dataset::read_rgb(&path);
    } else {
        let _ = segtool_core::dataset::read_mask(&path);
    }
}

/// The decoded size the header declares (any format `image` guesses from the bytes, at
/// up to 8 bytes a pixel), or `None` when it has no readable header.
fn declared_bytes(file: &[u8]) -> Option<u64> {
    let reader = image::ImageReader::new(Cursor::new(file)).with_guessed_format().ok()?;
    let (w, h) = reader.into_dimensions().ok()?;
    Some(u64::from(w) * u64::from(h) * 8)
}
