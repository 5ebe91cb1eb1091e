//! Image sizes on the command line. One type, [`Size`] (from `segtool-model-spec`), two
//! spellings: `HxW` for model input sizes (`--size 512x1024`, as the rest of segtool
//! writes shapes) and `WxH` for raw video frames (`--raw 1920x1080`, as ffmpeg does).

pub use segtool_model_spec::size::Size;

/// `HEIGHTxWIDTH`, both positive.
pub fn hxw(s: &str) -> Result<Size, String> {
    Size::parse_hxw(s)
}

/// `WIDTHxHEIGHT`, both positive, and no larger a frame than a decodable image (a
/// typo'd size would otherwise allocate its buffer before the first byte arrives).
pub fn wxh(s: &str) -> Result<Size, String> {
    let size = Size::parse_wxh(s)?;
    let bytes = size.pixels() * 3;
    if bytes > segtool_model_spec::images::MAX_DECODED_BYTES {
        return Err(format!(
            "`{s}`: frame too large: {}",
            segtool_model_spec::images::too_large_message(size.width, size.height, bytes)
        ));
    }
    Ok(size)
}
