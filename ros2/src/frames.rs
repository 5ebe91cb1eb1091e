//! Camera messages to RGB images, and class maps to the three mask messages.
//!
//! Accepts `sensor_msgs/Image` in `rgb8`, `bgr8`, `rgba8`, `bgra8` and `mono8` (grey,
//! expanded to RGB), with rows `step` bytes apart (padding ignored), and
//! `sensor_msgs/CompressedImage` holding a JPEG or PNG. Refuses, each with its cause
//! ([`BadFrame`]): another encoding (`bayer_rggb8`, `yuv422`, 16-bit, ...), a step shorter
//! than a row, data shorter than `step * height`, an empty image, the big-endian flag on an
//! 8-bit encoding (no sender sets it on bytes; a set flag means a corrupt or foreign
//! header), a corrupt or unsupported compressed image, and (counted by the callers that
//! decode CDR) a sample that is not CDR of the topic's type.
//!
//! Out: `class_mask` mono8 class ids at the image's size (mono16 little-endian above 255
//! classes), `color_mask` rgb8 in the model's palette, `overlay` rgb8; each with the
//! input's header.

use image::RgbImage;
use segtool_runtime::{ClassMap, Frame, FrameError, PixelFormat};

use crate::msgs::{Bytes, CompressedImage, Header, Image};

/// Why a camera message is not a frame: what the diagnostics count and the log names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadFrame {
    #[error("encoding {0:?} is not rgb8, bgr8, rgba8, bgra8 or mono8")]
    Encoding(String),
    #[error("step {step} is shorter than a row of {width} x {channels} bytes")]
    Step {
        step: u32,
        width: u32,
        channels: u32,
    },
    #[error("{got} data bytes, step x height needs {need}")]
    Short { got: usize, need: usize },
    #[error("an empty {0}x{1} image")]
    Empty(u32, u32),
    #[error("is_bigendian set on 8-bit encoding {0:?}")]
    BigEndian(String),
    #[error("compressed image ({format:?}): {reason}")]
    Compressed { format: String, reason: String },
    #[error("not CDR of the topic's type: {0}")]
    Undecodable(String),
}

impl BadFrame {
    /// A short name of the cause (the diagnostics' key, one log line per cause).
    pub fn cause(&self) -> &'static str {
        match self {
            BadFrame::Encoding(_) => "unknown encoding",
            BadFrame::Step { .. } => "step shorter than a row",
            BadFrame::Short { .. } => "data shorter than step x height",
            BadFrame::Empty(..) => "empty image",
            BadFrame::BigEndian(_) => "big-endian flag",
            BadFrame::Compressed { .. } => "corrupt compressed image",
            BadFrame::Undecodable(_) => "undecodable CDR",
        }
    }
}

/// The runtime's pixel format of a ROS `encoding` (`8UC1` is OpenCV's name for mono8).
fn pixel_format(encoding: &str) -> Option<PixelFormat> {
    Some(match encoding {
        "rgb8" => PixelFormat::Rgb8,
        "bgr8" => PixelFormat::Bgr8,
        "rgba8" => PixelFormat::Rgba8,
        "bgra8" => PixelFormat::Bgra8,
        "mono8" | "8UC1" => PixelFormat::Mono8,
        _ => return None,
    })
}

/// The RGB image an `Image` message holds: a [`Frame`] of its bytes, under ROS's own
/// rules on top (a zero `step` is no stride, and `data` holds `step x height` bytes).
pub fn image_to_rgb(msg: &Image) -> Result<RgbImage, BadFrame> {
    let format =
        pixel_format(&msg.encoding).ok_or_else(|| BadFrame::Encoding(msg.encoding.clone()))?;
    if msg.is_bigendian != 0 {
        return Err(BadFrame::BigEndian(msg.encoding.clone()));
    }
    let step_error = || BadFrame::Step {
        step: msg.step,
        width: msg.width,
        channels: format.bytes_per_pixel() as u32,
    };
    if msg.step == 0 && msg.width > 0 && msg.height > 0 {
        return Err(step_error());
    }
    let data = &msg.data.0;
    let frame = Frame::new(data, msg.width, msg.height, msg.step as usize, format).map_err(
        |e| match e {
            FrameError::Empty { width, height } => BadFrame::Empty(width, height),
            FrameError::Stride { .. } => step_error(),
            FrameError::Short { got, .. } => BadFrame::Short {
                got,
                need: msg.step as usize * msg.height as usize,
            },
        },
    )?;
    let need = msg.step as usize * msg.height as usize;
    if data.len() < need {
        return Err(BadFrame::Short {
            got: data.len(),
            need,
        });
    }
    Ok(frame.to_rgb())
}

/// [`image_to_rgb`] taking the message: an `rgb8` image without row padding becomes the
/// image in place, its `data` moved rather than copied (the node's camera path: 0.9 MB
/// per 640x480 frame); every other layout is converted as there, with the same checks.
pub fn into_rgb(msg: Image) -> Result<RgbImage, BadFrame> {
    let tight = msg.encoding == "rgb8"
        && msg.is_bigendian == 0
        && msg.width > 0
        && msg.height > 0
        && msg.step as usize == msg.width as usize * 3;
    let need = msg.step as usize * msg.height as usize;
    if !tight || msg.data.0.len() < need {
        return image_to_rgb(&msg);
    }
    let (width, height) = (msg.width, msg.height);
    let mut data = msg.data.0;
    data.truncate(need);
    Ok(RgbImage::from_raw(width, height, data).expect("rgb8 data of step x height bytes"))
}

/// The RGB image a `CompressedImage` holds (JPEG or PNG, told by its bytes; `format` is
/// only named in errors, as senders write it in several ways).
pub fn compressed_to_rgb(msg: &CompressedImage) -> Result<RgbImage, BadFrame> {
    let err = |reason: String| BadFrame::Compressed {
        format: msg.format.clone(),
        reason,
    };
    let format = image::guess_format(&msg.data.0).map_err(|e| err(e.to_string()))?;
    if !matches!(format, image::ImageFormat::Jpeg | image::ImageFormat::Png) {
        return Err(err(format!("{format:?} is not JPEG or PNG")));
    }
    let img =
        image::load_from_memory_with_format(&msg.data.0, format).map_err(|e| err(e.to_string()))?;
    Ok(img.to_rgb8())
}

/// `class_mask`: class ids at the image's size, mono8 for a model of at most 256 classes,
/// mono16 (little-endian) above, as the runtime's class map holds them.
pub fn class_mask(header: &Header, mask: &ClassMap) -> Image {
    let (h, w) = mask.dim();
    let encoding = match mask.bits() {
        8 => "mono8",
        _ => "mono16",
    };
    Image {
        header: header.clone(),
        height: h as u32,
        width: w as u32,
        encoding: encoding.into(),
        is_bigendian: 0,
        step: (w * mask.bits() as usize / 8) as u32,
        data: Bytes(mask.to_le_bytes()),
    }
}

/// An rgb8 message of `img`.
pub fn rgb_message(header: &Header, img: &RgbImage) -> Image {
    rgb_message_of(header, img.clone())
}

/// [`rgb_message`] taking the image: its pixels become the message's `data` uncopied.
pub fn rgb_message_of(header: &Header, img: RgbImage) -> Image {
    Image {
        header: header.clone(),
        height: img.height(),
        width: img.width(),
        encoding: "rgb8".into(),
        is_bigendian: 0,
        step: img.width() * 3,
        data: Bytes(img.into_raw()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(encoding: &str, w: u32, h: u32, step: u32, data: Vec<u8>) -> Image {
        Image {
            encoding: encoding.into(),
            width: w,
            height: h,
            step,
            data: Bytes(data),
            ..Default::default()
        }
    }

    #[test]
    fn every_accepted_encoding_gives_the_same_rgb() {
        // One red and one grey-ish pixel, rows padded to 8 bytes.
        let rgb = image_to_rgb(&msg("rgb8", 2, 1, 8, vec![200, 10, 20, 7, 8, 9, 0, 0])).unwrap();
        // In place: the same pixels, and padded rows or short data still go through the
        // checked conversion.
        let tight = msg("rgb8", 2, 2, 6, (0..12).collect());
        assert_eq!(
            into_rgb(tight.clone()).unwrap(),
            image_to_rgb(&tight).unwrap()
        );
        let longer = msg("rgb8", 2, 1, 6, (0..9).collect());
        assert_eq!(
            into_rgb(longer.clone()).unwrap().into_raw(),
            (0..6).collect::<Vec<u8>>()
        );
        let padded = msg("rgb8", 2, 1, 8, vec![200, 10, 20, 7, 8, 9, 0, 0]);
        assert_eq!(
            into_rgb(padded.clone()).unwrap(),
            image_to_rgb(&padded).unwrap()
        );
        let short = msg("rgb8", 2, 2, 6, vec![0; 7]);
        assert_eq!(
            into_rgb(short.clone()).unwrap_err().to_string(),
            image_to_rgb(&short).unwrap_err().to_string()
        );
        assert_eq!(rgb.as_raw(), &[200, 10, 20, 7, 8, 9]);
        let bgr = image_to_rgb(&msg("bgr8", 2, 1, 6, vec![20, 10, 200, 9, 8, 7])).unwrap();
        assert_eq!(bgr, rgb);
        let bgra =
            image_to_rgb(&msg("bgra8", 2, 1, 8, vec![20, 10, 200, 255, 9, 8, 7, 0])).unwrap();
        assert_eq!(bgra, rgb);
        let mono = image_to_rgb(&msg("mono8", 2, 1, 2, vec![3, 250])).unwrap();
        assert_eq!(mono.as_raw(), &[3, 3, 3, 250, 250, 250]);
    }

    #[test]
    fn bad_messages_name_their_cause() {
        let e = |m: Image| image_to_rgb(&m).unwrap_err();
        assert_eq!(
            e(msg("bayer_rggb8", 2, 1, 2, vec![0; 2])).cause(),
            "unknown encoding"
        );
        assert_eq!(
            e(msg("rgb8", 2, 1, 5, vec![0; 6])).cause(),
            "step shorter than a row"
        );
        assert_eq!(
            e(msg("rgb8", 2, 2, 6, vec![0; 11])).cause(),
            "data shorter than step x height"
        );
        let mut big = msg("rgb8", 1, 1, 3, vec![0; 3]);
        big.is_bigendian = 1;
        assert_eq!(e(big).cause(), "big-endian flag");
        let jpeg = CompressedImage {
            format: "jpeg".into(),
            data: Bytes(vec![0xff, 0xd8, 0xff, 0xe0, 1, 2, 3]),
            ..Default::default()
        };
        assert_eq!(
            compressed_to_rgb(&jpeg).unwrap_err().cause(),
            "corrupt compressed image"
        );
    }

    #[test]
    fn masks_above_256_classes_are_mono16() {
        let mask = ClassMap::U8(ndarray::arr2(&[[1u8, 7]]));
        let m8 = class_mask(&Header::default(), &mask);
        assert_eq!(
            (m8.encoding.as_str(), m8.step, m8.data.0.clone()),
            ("mono8", 2, vec![1, 7])
        );
        let mask = ClassMap::U16(ndarray::arr2(&[[1u16, 299]]));
        let m16 = class_mask(&Header::default(), &mask);
        assert_eq!((m16.encoding.as_str(), m16.step), ("mono16", 4));
        assert_eq!(m16.data.0, vec![1, 0, 43, 1]);
    }
}
