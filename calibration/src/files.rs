//! Reading models, images and labels, and writing results atomically; errors name the file.

use std::path::{Path, PathBuf};

use image::RgbImage;
use prost::Message;
use segtool_model_spec::{ModelSpec, SPEC_METADATA_KEY};
use segtool_onnx::proto::ModelProto;

use crate::error::{io_err, CalibrationError};

/// Reads and decodes an ONNX model.
pub fn load_model(path: &Path) -> Result<ModelProto, CalibrationError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    ModelProto::decode(bytes.as_slice())
        .map_err(|e| CalibrationError::Model(format!("{}: {e}", path.display())))
}

/// The spec in a decoded model's metadata.
pub fn model_spec(model: &ModelProto) -> Result<ModelSpec, CalibrationError> {
    let json = model
        .metadata_props
        .iter()
        .find(|e| e.key == SPEC_METADATA_KEY)
        .ok_or_else(|| {
            CalibrationError::Model(format!("no {SPEC_METADATA_KEY} in metadata_props"))
        })?;
    ModelSpec::from_json(&json.value).map_err(|e| CalibrationError::Model(e.to_string()))
}

/// The image files of a folder, sorted: [`segtool_model_spec::images::list_images`], the lister
/// every segtool command uses (exactly the formats the build decodes). None is an error.
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>, CalibrationError> {
    let out = segtool_model_spec::images::list_images(dir).map_err(io_err(dir))?;
    if out.is_empty() {
        return Err(CalibrationError::Input(format!(
            "{}: no images ({})",
            dir.display(),
            segtool_model_spec::images::IMAGE_EXTENSIONS.join(", ")
        )));
    }
    Ok(out)
}

pub fn read_image(path: &Path) -> Result<RgbImage, CalibrationError> {
    // The dataset reader: refuses image bombs by their header, naming size and limit.
    segtool_core::dataset::read_rgb(path).map_err(|e| CalibrationError::Input(e.to_string()))
}

/// A label mask (class indices) as the datasets read it: palette PNGs as raw indices, not
/// expanded to colours; image bombs refused by their header, naming size and limit.
pub fn read_label(path: &Path) -> Result<image::GrayImage, CalibrationError> {
    segtool_core::dataset::read_mask(path).map_err(|e| CalibrationError::Input(e.to_string()))
}

/// Writes `bytes` to `path` atomically ([`segtool_model_spec::io::write_atomic`]: a temp file
/// in the same folder, fsync, rename, fsync of the folder).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CalibrationError> {
    segtool_model_spec::io::write_atomic(path, bytes).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_only_decodable_images() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for name in ["b.png", "a.bmp", "c.JPG", "notes.txt"] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        let names: Vec<_> = list_images(d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["b.png", "c.JPG"]);

        // Only a .bmp: no images, and the message names what is accepted.
        let only_bmp = d.join("bmp");
        std::fs::create_dir(&only_bmp).unwrap();
        std::fs::write(only_bmp.join("a.bmp"), b"x").unwrap();
        let err = list_images(&only_bmp).unwrap_err().to_string();
        assert!(err.contains("no images (png, jpg, jpeg)"), "{err}");
    }
}
