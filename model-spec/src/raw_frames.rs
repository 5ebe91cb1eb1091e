//! Packed rgb24 frames from a byte stream: what `segtool infer --raw WIDTHxHEIGHT` reads
//! from stdin (`ffmpeg -i in.mp4 -f rawvideo -pix_fmt rgb24 -` writes it). Every frame is
//! `width * height * 3` bytes with no header; the stream ends at EOF between frames. A
//! stream that ends inside a frame, a read error, and a frame size over
//! [`MAX_DECODED_BYTES`] (the limit decoded images are refused over) are typed errors.

use std::io::Read;

use image::RgbImage;

use crate::images::MAX_DECODED_BYTES;
use crate::size::Size;

/// Why [`RawFrames`] gave no frame.
#[derive(Debug, thiserror::Error)]
pub enum RawFrameError {
    /// `width * height * 3` is over [`MAX_DECODED_BYTES`] (or does not fit in memory at all).
    #[error(
        "--raw {width}x{height}: a frame of {width}*{height}*3 bytes is over the {} MiB \
         limit frames and decoded images are refused over (wrong --raw size?)",
        MAX_DECODED_BYTES >> 20
    )]
    TooLarge { width: u32, height: u32 },
    /// The stream ended `got` bytes into frame `index`.
    #[error(
        "stdin ended inside frame {index}: {got} of {frame_bytes} bytes ({total} bytes in \
         all, not a multiple of the --raw {width}x{height} rgb24 frame size \
         {width}*{height}*3 = {frame_bytes}; wrong --raw size or pixel format?)"
    )]
    Truncated {
        index: u64,
        got: usize,
        frame_bytes: usize,
        total: u64,
        width: u32,
        height: u32,
    },
    /// Reading frame `index` failed.
    #[error("reading frame {index} from stdin: {source}")]
    Io {
        index: u64,
        source: std::io::Error,
    },
}

/// The frames of `reader`, one [`RawFrames::next_frame`] at a time.
pub struct RawFrames<R> {
    reader: R,
    width: u32,
    height: u32,
    frame_bytes: usize,
    index: u64,
}

impl<R: Read> RawFrames<R> {
    /// Frames of `size` from `reader`; refuses a frame size over [`MAX_DECODED_BYTES`].
    pub fn new(size: Size, reader: R) -> Result<Self, RawFrameError> {
        let (width, height) = (size.width, size.height);
        let too_large = || RawFrameError::TooLarge { width, height };
        // Checked: u32::MAX x u32::MAX x 3 does not fit in a u64.
        let bytes = u64::from(width)
            .checked_mul(u64::from(height))
            .and_then(|pixels| pixels.checked_mul(3))
            .filter(|&bytes| bytes <= MAX_DECODED_BYTES)
            .ok_or_else(too_large)?;
        Ok(Self {
            reader,
            width,
            height,
            frame_bytes: usize::try_from(bytes).map_err(|_| too_large())?,
            index: 0,
        })
    }

    /// Bytes in one frame.
    pub fn frame_bytes(&self) -> usize {
        self.frame_bytes
    }

    /// Frames read so far (the index of the next one).
    pub fn frames_read(&self) -> u64 {
        self.index
    }

    /// The next frame, read into `buf` (a recycled buffer, resized to the frame; pass
    /// `Vec::new()` for a fresh one); `None` at EOF between frames.
    pub fn next_frame(&mut self, mut buf: Vec<u8>) -> Result<Option<RgbImage>, RawFrameError> {
        buf.resize(self.frame_bytes, 0);
        let index = self.index;
        let mut filled = 0;
        while filled < buf.len() {
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(source) => return Err(RawFrameError::Io { index, source }),
            }
        }
        if filled == 0 {
            return Ok(None);
        }
        if filled < self.frame_bytes {
            return Err(RawFrameError::Truncated {
                index,
                got: filled,
                frame_bytes: self.frame_bytes,
                total: index * self.frame_bytes as u64 + filled as u64,
                width: self.width,
                height: self.height,
            });
        }
        self.index += 1;
        let frame = RgbImage::from_raw(self.width, self.height, buf)
            .expect("the buffer holds exactly one frame");
        Ok(Some(frame))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_then_eof_and_a_cut_frame() {
        let size = Size::new(1, 2);
        let mut r = RawFrames::new(size, &[1u8, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13][..]).unwrap();
        assert_eq!(r.frame_bytes(), 6);
        assert_eq!(r.next_frame(Vec::new()).unwrap().unwrap().as_raw(), &[1, 2, 3, 4, 5, 6]);
        assert_eq!(r.next_frame(vec![0; 99]).unwrap().unwrap().as_raw(), &[7, 8, 9, 10, 11, 12]);
        let e = r.next_frame(Vec::new()).unwrap_err();
        assert!(e.to_string().contains("inside frame 2: 1 of 6 bytes (13 bytes in all"), "{e}");
        let mut r = RawFrames::new(size, &[][..]).unwrap();
        assert!(r.next_frame(Vec::new()).unwrap().is_none());
    }

    #[test]
    fn frame_sizes_over_the_limit_are_refused() {
        let e = RawFrames::new(Size::new(u32::MAX, u32::MAX), std::io::empty()).err().unwrap();
        assert!(matches!(e, RawFrameError::TooLarge { .. }), "{e}");
        assert!(RawFrames::new(Size::new(8192, 8192), std::io::empty()).is_ok());
    }
}
