//! Which files are images: the one lister every command uses (`infer` folders and globs,
//! `calibrate`, the dataset layouts behind `eval`, `train` and `demo`).
//!
//! It accepts exactly the formats this build decodes: the workspace builds `image` with
//! the `png` and `jpeg` features only, so a `.bmp` or `.tiff` is not listed (it would
//! only fail later, at decoding). Extensions compare case-insensitively.

use std::path::{Path, PathBuf};

/// File extensions of the formats the build decodes, lower case.
pub const IMAGE_EXTENSIONS: &[&str] = &["png", "jpg", "jpeg"];

/// Images whose decoded pixels would take more than this are refused from their header,
/// before any pixel buffer is allocated: the `image` crate's own default allocation limit
/// (512 MiB, e.g. 11585 x 11585 RGB), which it reports only as "Memory limit exceeded".
pub const MAX_DECODED_BYTES: u64 = 512 << 20;

/// Why [`decode`] gave no image.
#[derive(Debug)]
pub enum DecodeError {
    /// The decoder's own error (unreadable, corrupt, unsupported, truncated).
    Image(image::ImageError),
    /// The header declares more than [`MAX_DECODED_BYTES`] of pixels.
    TooLarge { width: u32, height: u32, bytes: u64 },
}

/// `width` x `height` needing `bytes` when decoded, against [`MAX_DECODED_BYTES`], in words.
pub fn too_large_message(width: u32, height: u32, bytes: u64) -> String {
    format!(
        "{width}x{height} pixels need {} MiB decoded, over the {} MiB limit",
        bytes.div_ceil(1 << 20),
        MAX_DECODED_BYTES >> 20
    )
}

/// Decodes `path` as `image::open` does (format from the extension), but reads the header
/// first and refuses an image over [`MAX_DECODED_BYTES`] with its size and the limit.
pub fn decode(path: &Path) -> Result<image::DynamicImage, DecodeError> {
    use image::ImageDecoder;
    let decoder = image::ImageReader::open(path)
        .map_err(|e| DecodeError::Image(e.into()))?
        .into_decoder()
        .map_err(DecodeError::Image)?;
    let (width, height) = decoder.dimensions();
    let bytes = decoder.total_bytes();
    if bytes > MAX_DECODED_BYTES {
        return Err(DecodeError::TooLarge {
            width,
            height,
            bytes,
        });
    }
    image::DynamicImage::from_decoder(decoder).map_err(DecodeError::Image)
}

/// Whether `path` has the extension of a decodable image (case-insensitive). Looks at the
/// name only, not at the file.
pub fn is_image(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| IMAGE_EXTENSIONS.iter().any(|x| e.eq_ignore_ascii_case(x)))
}

/// The image files ([`is_image`]) directly in `dir`, not recursive, sorted by path (so the
/// order does not depend on the file system's).
pub fn list_images(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut images: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| is_image(p) && p.is_file())
        .collect();
    images.sort();
    Ok(images)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_decodable_formats_only_sorted() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for name in [
            "b.PNG",
            "a.jpg",
            "c.bmp",
            "notes.txt",
            "d.Jpeg",
            "png",
            "e.png.txt",
        ] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        // A folder with an image's name is not a file to decode.
        std::fs::create_dir(d.join("f.png")).unwrap();
        let names: Vec<String> = list_images(d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.jpg", "b.PNG", "d.Jpeg"]);
        assert!(list_images(&d.join("missing")).is_err());
    }

    #[test]
    fn extensions_match_the_decoders_built() {
        for ext in IMAGE_EXTENSIONS {
            let format = image::ImageFormat::from_extension(ext).unwrap();
            assert!(format.reading_enabled(), "{ext} listed but not decodable");
        }
        // BMP is not built: listing it would only defer the failure to decoding.
        assert!(
            !image::ImageFormat::Bmp.reading_enabled(),
            "BMP decoding is built now: add bmp to IMAGE_EXTENSIONS"
        );
        assert!(!is_image(Path::new("x.bmp")));
    }
}
