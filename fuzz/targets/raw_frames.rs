//! Raw video frames (`segtool infer --raw WxH`): the input is a first line with the size
//! as given to `--raw` (`WIDTHxHEIGHT`), then the stdin stream of packed rgb24 frames.
//!
//! Feeds the size to `Size::parse_wxh` (what the `--raw` flag parses with) and the stream
//! to `raw_frames::RawFrames`, the reader of `infer --raw` and `--raw --live`, each frame
//! into a recycled buffer as the batch reader does; every frame read is normalised as the
//! runtime does for a segtool export.
//!
//! Refuses (stops before reading) a frame size over 1 MiB: a frame is read only when the
//! stream holds its bytes, so bigger frames would only fill the buffer of the truncation
//! error (that path is the same for small frames).

use std::io::Cursor;

use segtool_model_spec::raw_frames::RawFrames;
use segtool_model_spec::size::Size;

pub fn run(data: &[u8]) {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let (line, stream) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    let Ok(size) = Size::parse_wxh(&String::from_utf8_lossy(line)) else {
        return;
    };
    let Ok(mut frames) = RawFrames::new(size, Cursor::new(stream)) else {
        return;
    };
    if frames.frame_bytes() > 1 << 20 {
        return;
    }
    let spec = segtool_testkit::tiny_spec(3);
    let mut recycled = Vec::new();
    while let Ok(Some(frame)) = frames.next_frame(std::mem::take(&mut recycled)) {
        assert_eq!(frame.dimensions(), (size.width, size.height));
        let _ = segtool_runtime::expert::normalise(&frame, &spec);
        recycled = frame.into_raw();
    }
}
