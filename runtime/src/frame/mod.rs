//! A borrowed frame: the pixels every front end hands the runtime (a GStreamer buffer, a
//! ROS `sensor_msgs/Image`, a numpy array, a C pointer), described once and turned into
//! the runtime's RGB image in one place.
//!
//! Accepts 8-bit packed formats ([`PixelFormat`]): `rgb8`, `bgr8`, `rgba8`, `bgra8`,
//! `rgbx8`, `bgrx8` (the fourth byte is not read) and `mono8` (grey, expanded to RGB),
//! with rows `stride` bytes apart (the padding is not read; the last row may end without
//! it). Refuses, each with its cause ([`FrameError`]): an empty frame, a stride shorter
//! than a row, and data shorter than the rows need.


use std::fmt;
use std::str::FromStr;

use image::RgbImage;

/// How the bytes of a pixel are laid out.
///
/// ```
/// use segtool_runtime::PixelFormat;
/// let format: PixelFormat = "bgra8".parse()?; // GStreamer's and ROS 2's names
/// assert_eq!(format, PixelFormat::Bgra8);
/// assert_eq!(format.bytes_per_pixel(), 4);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PixelFormat {
    /// Red, green, blue.
    Rgb8,
    /// Blue, green, red (OpenCV's order).
    Bgr8,
    /// Red, green, blue, alpha (not read).
    Rgba8,
    /// Blue, green, red, alpha (not read).
    Bgra8,
    /// Red, green, blue, one unused byte.
    Rgbx8,
    /// Blue, green, red, one unused byte.
    Bgrx8,
    /// One grey byte, expanded to RGB.
    Mono8,
}

impl PixelFormat {
    /// Every format, in the order of [`PixelFormat::name`]'s list.
    pub const ALL: [PixelFormat; 7] = [
        PixelFormat::Rgb8,
        PixelFormat::Bgr8,
        PixelFormat::Rgba8,
        PixelFormat::Bgra8,
        PixelFormat::Rgbx8,
        PixelFormat::Bgrx8,
        PixelFormat::Mono8,
    ];

    /// The lower-case name (`rgb8`, ..., ROS's encoding names where ROS has one).
    pub fn name(self) -> &'static str {
        match self {
            PixelFormat::Rgb8 => "rgb8",
            PixelFormat::Bgr8 => "bgr8",
            PixelFormat::Rgba8 => "rgba8",
            PixelFormat::Bgra8 => "bgra8",
            PixelFormat::Rgbx8 => "rgbx8",
            PixelFormat::Bgrx8 => "bgrx8",
            PixelFormat::Mono8 => "mono8",
        }
    }

    /// Bytes per pixel.
    pub fn bytes_per_pixel(self) -> usize {
        match self {
            PixelFormat::Rgb8 | PixelFormat::Bgr8 => 3,
            PixelFormat::Mono8 => 1,
            _ => 4,
        }
    }

    /// The byte offsets of red, green and blue in a pixel; `None` for grey.
    pub fn rgb_offsets(self) -> Option<[usize; 3]> {
        match self {
            PixelFormat::Rgb8 | PixelFormat::Rgba8 | PixelFormat::Rgbx8 => Some([0, 1, 2]),
            PixelFormat::Bgr8 | PixelFormat::Bgra8 | PixelFormat::Bgrx8 => Some([2, 1, 0]),
            PixelFormat::Mono8 => None,
        }
    }
}

impl fmt::Display for PixelFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PixelFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.to_ascii_lowercase();
        PixelFormat::ALL
            .into_iter()
            .find(|p| p.name() == lower)
            .ok_or_else(|| {
                format!(
                    "pixel format {s:?} is not one of {}",
                    PixelFormat::ALL.map(PixelFormat::name).join(", ")
                )
            })
    }
}

/// Why bytes are not a frame.
///
/// # Example
///
/// ```
/// use segtool_runtime::{Frame, FrameError, PixelFormat, RuntimeError};
/// let data = [0u8; 12];
/// // A row of two RGB pixels is 6 bytes: a stride of 4 would make the rows overlap.
/// let err = Frame::new(&data, 2, 2, 4, PixelFormat::Rgb8).unwrap_err();
/// assert!(matches!(err, FrameError::Stride { stride: 4, row: 6, .. }));
/// // `?` in a function returning the crate's error turns it into `RuntimeError::Frame`.
/// let err = RuntimeError::from(err);
/// assert!(err.to_string().starts_with("bad frame: stride 4 is shorter than a row"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// No pixels.
    #[error("an empty {width}x{height} frame")]
    Empty {
        /// Its width.
        width: u32,
        /// Its height.
        height: u32,
    },
    /// Rows overlap.
    #[error("stride {stride} is shorter than a row of {width} {format} pixels ({row} bytes)")]
    Stride {
        /// The stride given.
        stride: usize,
        /// The frame's width.
        width: u32,
        /// Its pixel format.
        format: PixelFormat,
        /// Bytes in one row.
        row: usize,
    },
    /// The buffer ends before the last row does.
    #[error("{got} bytes of pixels, {need} needed ({height} rows {stride} bytes apart)")]
    Short {
        /// Bytes given.
        got: usize,
        /// Bytes needed.
        need: usize,
        /// The frame's height.
        height: u32,
        /// Its stride.
        stride: usize,
    },
}

/// Borrowed pixels with their size, row stride and [`PixelFormat`], checked on creation.
///
/// ```
/// use segtool_runtime::{Frame, PixelFormat};
/// // Two BGR pixels in a row padded to 8 bytes, as a camera driver may hand them over.
/// let data = [10, 20, 30, 40, 50, 60, 0, 0];
/// let frame = Frame::new(&data, 2, 1, 8, PixelFormat::Bgr8)?;
/// assert_eq!(frame.to_rgb().as_raw(), &[30, 20, 10, 60, 50, 40]);
/// // Too short for its size: an error naming what is missing, never a panic.
/// assert!(Frame::new(&data[..5], 2, 1, 0, PixelFormat::Bgr8).is_err());
/// # Ok::<(), segtool_runtime::FrameError>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Frame<'a> {
    data: &'a [u8],
    width: u32,
    height: u32,
    stride: usize,
    format: PixelFormat,
}

impl<'a> Frame<'a> {
    /// `height` rows of `width` pixels in `format`, `stride` bytes apart (0: packed rows).
    pub fn new(
        data: &'a [u8],
        width: u32,
        height: u32,
        stride: usize,
        format: PixelFormat,
    ) -> Result<Self, FrameError> {
        if width == 0 || height == 0 {
            return Err(FrameError::Empty { width, height });
        }
        let row = width as usize * format.bytes_per_pixel();
        let stride = if stride == 0 { row } else { stride };
        if stride < row {
            return Err(FrameError::Stride {
                stride,
                width,
                format,
                row,
            });
        }
        let need = stride
            .checked_mul(height as usize - 1)
            .and_then(|n| n.checked_add(row));
        match need {
            Some(need) if data.len() >= need => Ok(Self {
                data,
                width,
                height,
                stride,
                format,
            }),
            _ => Err(FrameError::Short {
                got: data.len(),
                need: need.unwrap_or(usize::MAX),
                height,
                stride,
            }),
        }
    }

    /// Packed rows of an RGB image.
    pub fn rgb(img: &'a RgbImage) -> Self {
        Self::new(
            img.as_raw(),
            img.width(),
            img.height(),
            0,
            PixelFormat::Rgb8,
        )
        .expect("an RgbImage is a packed rgb8 frame")
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Bytes from one row to the next.
    pub fn stride(&self) -> usize {
        self.stride
    }

    /// The pixel format.
    pub fn format(&self) -> PixelFormat {
        self.format
    }

    /// Row `y`'s pixels, without the padding.
    pub fn row(&self, y: u32) -> &'a [u8] {
        let start = y as usize * self.stride;
        &self.data[start..start + self.width as usize * self.format.bytes_per_pixel()]
    }

    /// The frame as a packed RGB image.
    pub fn to_rgb(&self) -> RgbImage {
        let (w, h) = (self.width as usize, self.height as usize);
        let mut out = Vec::with_capacity(w * h * 3);
        let step = self.format.bytes_per_pixel();
        for y in 0..self.height {
            let line = self.row(y);
            match self.format.rgb_offsets() {
                Some([0, 1, 2]) if step == 3 => out.extend_from_slice(line),
                Some([r, g, b]) => {
                    for px in line.chunks_exact(step) {
                        out.extend_from_slice(&[px[r], px[g], px[b]]);
                    }
                }
                None => line.iter().for_each(|&v| out.extend_from_slice(&[v, v, v])),
            }
        }
        RgbImage::from_raw(self.width, self.height, out).expect("w x h x 3 bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x2 frame in `format` with `pad` bytes after each row; pixel (x, y) has RGB
    /// `(10x + y, 100 + x, 200 - y)`, grey `10x + y`.
    fn bytes(format: PixelFormat, pad: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for y in 0..2u8 {
            for x in 0..3u8 {
                let rgb = [10 * x + y, 100 + x, 200 - y];
                match format.rgb_offsets() {
                    None => out.push(rgb[0]),
                    Some(offsets) => {
                        let mut px = vec![0xEE; format.bytes_per_pixel()];
                        for (c, o) in offsets.iter().enumerate() {
                            px[*o] = rgb[c];
                        }
                        out.extend(px);
                    }
                }
            }
            out.extend(std::iter::repeat_n(0x77, pad));
        }
        out
    }

    #[test]
    fn every_format_with_and_without_padding_gives_the_same_rgb() {
        for format in PixelFormat::ALL {
            for pad in [0, 5] {
                let data = bytes(format, pad);
                let stride = if pad == 0 {
                    0
                } else {
                    3 * format.bytes_per_pixel() + pad
                };
                // The last row's padding may be missing.
                let data = &data[..data.len() - pad];
                let rgb = Frame::new(data, 3, 2, stride, format).unwrap().to_rgb();
                for (x, y, p) in rgb.enumerate_pixels() {
                    let v = 10 * x as u8 + y as u8;
                    let want = match format {
                        PixelFormat::Mono8 => [v, v, v],
                        _ => [v, 100 + x as u8, 200 - y as u8],
                    };
                    assert_eq!(p.0, want, "{format} pad {pad} at ({x}, {y})");
                }
            }
            assert_eq!(format.name().parse::<PixelFormat>(), Ok(format));
        }
    }

    #[test]
    fn bad_frames_say_why() {
        let data = [0u8; 17];
        let e = Frame::new(&data, 0, 2, 0, PixelFormat::Rgb8).unwrap_err();
        assert_eq!(
            e,
            FrameError::Empty {
                width: 0,
                height: 2
            }
        );
        let e = Frame::new(&data, 3, 2, 8, PixelFormat::Rgb8).unwrap_err();
        assert!(e.to_string().contains("shorter than a row"), "{e}");
        let e = Frame::new(&data, 3, 2, 9, PixelFormat::Rgb8).unwrap_err();
        assert!(
            matches!(
                e,
                FrameError::Short {
                    got: 17,
                    need: 18,
                    ..
                }
            ),
            "{e}"
        );
        assert!("yuyv".parse::<PixelFormat>().unwrap_err().contains("mono8"));
    }
}
