//! Caps: the pad templates, how caps map across the element for each output mode, and
//! the pixel conversions between GStreamer frames and the runtime's RGB images.

use gst::prelude::*;
use gst_video::prelude::*;
use gst_video::{VideoFormat, VideoFrameRef, VideoInfo};
use image::RgbImage;
use segtool_runtime::{ClassMap, Frame, PixelFormat};

use super::props::OutputMode;

/// The formats the sink pad takes.
pub const SINK_FORMATS: [VideoFormat; 5] = [
    VideoFormat::Rgb,
    VideoFormat::Bgr,
    VideoFormat::Rgbx,
    VideoFormat::Bgrx,
    VideoFormat::Rgba,
];

fn format_names(formats: &[VideoFormat]) -> gst::List {
    gst::List::new(formats.iter().map(|f| f.to_str().to_send_value()))
}

/// Any size, any frame rate, these formats.
pub fn raw_caps(formats: &[VideoFormat]) -> gst::Caps {
    gst::Caps::builder("video/x-raw")
        .field("format", format_names(formats))
        .field("width", gst::IntRange::new(1, i32::MAX))
        .field("height", gst::IntRange::new(1, i32::MAX))
        .field(
            "framerate",
            gst::FractionRange::new(gst::Fraction::new(0, 1), gst::Fraction::new(i32::MAX, 1)),
        )
        .build()
}

pub fn sink_template() -> gst::PadTemplate {
    gst::PadTemplate::new(
        "sink",
        gst::PadDirection::Sink,
        gst::PadPresence::Always,
        &raw_caps(&SINK_FORMATS),
    )
    .expect("valid sink template")
}

pub fn src_template() -> gst::PadTemplate {
    let mut formats = SINK_FORMATS.to_vec();
    formats.extend([VideoFormat::Gray8, VideoFormat::Gray16Le]);
    gst::PadTemplate::new(
        "src",
        gst::PadDirection::Src,
        gst::PadPresence::Always,
        &raw_caps(&formats),
    )
    .expect("valid src template")
}

/// The mask format for `classes` (unknown before the model is open: both): GRAY8 up to
/// 256 classes, GRAY16_LE above, as the runtime's class maps hold 8 or 16 bits.
pub fn mask_formats(classes: Option<usize>) -> Vec<VideoFormat> {
    match classes {
        Some(c) if ClassMap::bits_for(c) == 16 => vec![VideoFormat::Gray16Le],
        Some(_) => vec![VideoFormat::Gray8],
        None => vec![VideoFormat::Gray8, VideoFormat::Gray16Le],
    }
}

/// The caps on the other side of the element for `caps` on `direction`'s pad.
pub fn transform(
    direction: gst::PadDirection,
    caps: &gst::Caps,
    output: OutputMode,
    classes: Option<usize>,
    filter: Option<&gst::Caps>,
) -> gst::Caps {
    let other = if output != OutputMode::Mask {
        // Overlay and colour keep the frame's format: caps pass through.
        caps.clone()
    } else {
        let formats = match direction {
            gst::PadDirection::Sink => mask_formats(classes),
            _ => SINK_FORMATS.to_vec(),
        };
        let mut out = gst::Caps::new_empty();
        {
            let out = out.get_mut().expect("new caps");
            for (s, features) in caps.iter_with_features() {
                let mut s = s.to_owned();
                s.set("format", format_names(&formats));
                s.remove_fields(["colorimetry", "chroma-site"]);
                out.append_structure_full(s, Some(features.to_owned()));
            }
        }
        out
    };
    match filter {
        Some(f) => f.intersect_with_mode(&other, gst::CapsIntersectMode::First),
        None => other,
    }
}

/// Copies a frame of one of [`SINK_FORMATS`] into a packed RGB image.
pub fn to_rgb(frame: &VideoFrameRef<&gst::BufferRef>) -> Result<RgbImage, String> {
    let format = pixel_format(frame.format())?;
    let data = frame
        .plane_data(0)
        .map_err(|e| format!("mapping the frame: {e}"))?;
    let stride = frame.plane_stride()[0] as usize;
    Frame::new(data, frame.width(), frame.height(), stride, format)
        .map(|f| f.to_rgb())
        .map_err(|e| e.to_string())
}

/// The runtime's name for one of [`SINK_FORMATS`].
fn pixel_format(format: VideoFormat) -> Result<PixelFormat, String> {
    Ok(match format {
        VideoFormat::Rgb => PixelFormat::Rgb8,
        VideoFormat::Bgr => PixelFormat::Bgr8,
        VideoFormat::Rgbx => PixelFormat::Rgbx8,
        VideoFormat::Rgba => PixelFormat::Rgba8,
        VideoFormat::Bgrx => PixelFormat::Bgrx8,
        other => {
            return Err(format!(
                "format {} is not one segtoolseg takes (RGB, BGR, RGBx, BGRx, RGBA)",
                other.to_str()
            ))
        }
    })
}

/// Writes `rgb` into `out` (same size, one of [`SINK_FORMATS`]); the fourth byte of
/// 4-byte formats comes from `input` (alpha kept), or is opaque without one.
pub fn write_rgb(
    rgb: &RgbImage,
    input: Option<&VideoFrameRef<&gst::BufferRef>>,
    out: &mut VideoFrameRef<&mut gst::BufferRef>,
) -> Result<(), String> {
    let (w, h) = (out.width() as usize, out.height() as usize);
    let format = pixel_format(out.format())?;
    let (order, step) = (
        format.rgb_offsets().expect("sink formats are colour"),
        format.bytes_per_pixel(),
    );
    let stride = out.plane_stride()[0] as usize;
    let in_plane = match input {
        Some(f) => Some((
            f.plane_data(0).map_err(|e| e.to_string())?,
            f.plane_stride()[0] as usize,
        )),
        None => None,
    };
    let data = out
        .plane_data_mut(0)
        .map_err(|e| format!("mapping the output: {e}"))?;
    let src = rgb.as_raw();
    for y in 0..h {
        let row = &mut data[y * stride..y * stride + w * step];
        let rgb_row = &src[y * w * 3..(y + 1) * w * 3];
        for (x, (px, c)) in row
            .chunks_exact_mut(step)
            .zip(rgb_row.chunks_exact(3))
            .enumerate()
        {
            px[order[0]] = c[0];
            px[order[1]] = c[1];
            px[order[2]] = c[2];
            if step == 4 {
                px[3] = match in_plane {
                    Some((d, s)) => d[y * s + x * 4 + 3],
                    None => 255,
                };
            }
        }
    }
    Ok(())
}

/// Writes the class ids into a GRAY8 (ids of at most 256 classes) or GRAY16_LE frame.
pub fn write_mask(
    mask: &ClassMap,
    out: &mut VideoFrameRef<&mut gst::BufferRef>,
) -> Result<(), String> {
    let (w, h) = (out.width() as usize, out.height() as usize);
    if mask.dim() != (h, w) {
        return Err(format!("mask {:?} for a {w}x{h} frame", mask.dim()));
    }
    let format = out.format();
    let stride = out.plane_stride()[0] as usize;
    let data = out
        .plane_data_mut(0)
        .map_err(|e| format!("mapping the output: {e}"))?;
    match (format, mask) {
        (VideoFormat::Gray8, ClassMap::U8(ids)) => {
            for (y, ids) in ids.outer_iter().enumerate() {
                for (d, &id) in data[y * stride..][..w].iter_mut().zip(ids.iter()) {
                    *d = id;
                }
            }
        }
        (VideoFormat::Gray16Le, _) => {
            let wide = match mask {
                ClassMap::U16(ids) => std::borrow::Cow::Borrowed(ids),
                ClassMap::U8(_) => std::borrow::Cow::Owned(mask.to_u16()),
            };
            for (y, ids) in wide.outer_iter().enumerate() {
                let row = data[y * stride..][..2 * w].chunks_exact_mut(2);
                for (d, id) in row.zip(ids.iter()) {
                    d.copy_from_slice(&id.to_le_bytes());
                }
            }
        }
        (other, _) => return Err(format!("a {}-bit mask in {}", mask.bits(), other.to_str())),
    }
    Ok(())
}

/// `info`'s caps for logs and errors.
pub fn describe(info: &VideoInfo) -> String {
    format!(
        "{} {}x{}",
        info.format().to_str(),
        info.width(),
        info.height()
    )
}
