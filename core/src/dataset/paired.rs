//! What every on-disk layout shares once its files are found: a list of (image, mask)
//! paths, an optional label lookup table, and the checks done when a sample is read.
//!
//! Layouts only differ in where files live and how raw mask values map to train ids, so
//! each layout module builds a [`PairedDataset`] and this module does the reading.

use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use image::GrayImage;

use super::{read_rgb, DatasetError, Sample, SegDataset};
use crate::IGNORE_LABEL;

/// Raw mask value -> train id. A full 256-entry table, so mapping is one load per pixel
/// and every raw value has a defined result.
pub(crate) type Lut = [u8; 256];

/// One sample's files. `lut` is per pair because a layout may mix mask flavours (a
/// Cityscapes tree with `labelTrainIds` for some images and only `labelIds` for others).
#[derive(Clone, Debug)]
pub(crate) struct Pair {
    pub image: PathBuf,
    pub mask: PathBuf,
    pub name: String,
    pub lut: Option<&'static Lut>,
}

#[derive(Clone, Debug)]
pub(crate) struct PairedDataset {
    pub pairs: Vec<Pair>,
    /// Labels must be below this (or be 255). `None` when the class count is unknown (a
    /// folder without a classes file), which skips the check.
    pub num_classes: Option<usize>,
}

impl SegDataset for PairedDataset {
    fn len(&self) -> usize {
        self.pairs.len()
    }

    fn get(&self, index: usize) -> Result<Sample, DatasetError> {
        let pair = &self.pairs[index];
        let image = read_rgb(&pair.image)?;
        let mut mask = read_mask(&pair.mask)?;
        if mask.dimensions() != image.dimensions() {
            return Err(DatasetError::SizeMismatch {
                mask: pair.mask.clone(),
                mask_size: mask.dimensions(),
                image_size: image.dimensions(),
            });
        }
        if let Some(lut) = pair.lut {
            for v in mask.iter_mut() {
                *v = lut[*v as usize];
            }
        }
        if let Some(num_classes) = self.num_classes {
            let bad = mask
                .iter()
                .find(|&&v| v != IGNORE_LABEL && v as usize >= num_classes);
            if let Some(&value) = bad {
                return Err(DatasetError::LabelOutOfRange {
                    path: pair.mask.clone(),
                    value,
                    num_classes,
                });
            }
        }
        Ok(Sample { image, mask })
    }

    fn name(&self, index: usize) -> String {
        self.pairs[index].name.clone()
    }
}

/// Reads a label mask as raw values.
///
/// PNG masks are decoded with the `png` crate without transformations because the
/// `image` crate expands palette-indexed PNGs (VOC's `SegmentationClass`) to RGB, and
/// converting that colour to gray yields luminance, not the class index. Low bit depths
/// keep their raw values too (a 1-bit mask is 0/1, not 0/255). Other formats (JPEG,
/// gray+alpha, RGB with equal channels) go through `image` as before.
pub fn read_mask(path: &Path) -> Result<GrayImage, DatasetError> {
    let is_png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if is_png {
        if let Some(mask) = read_png_indices(path)? {
            return Ok(mask);
        }
    }
    super::decode(path).map(|m| m.to_luma8())
}

/// The raw samples of a single-channel PNG (grayscale or indexed), or `None` for other
/// colour types.
fn read_png_indices(path: &Path) -> Result<Option<GrayImage>, DatasetError> {
    use png::{BitDepth, ColorType};

    let png_err = |source| DatasetError::Png {
        path: path.into(),
        source,
    };
    let file = File::open(path).map_err(|source| DatasetError::Io {
        path: path.into(),
        source,
    })?;
    let mut decoder = png::Decoder::new(BufReader::new(file));
    decoder.set_transformations(png::Transformations::IDENTITY);
    let mut reader = decoder.read_info().map_err(png_err)?;
    let (color, depth) = reader.output_color_type();
    if !matches!(color, ColorType::Grayscale | ColorType::Indexed) {
        return Ok(None);
    }
    let size = reader
        .output_buffer_size()
        .ok_or_else(|| DatasetError::MaskFormat {
            path: path.into(),
            format: "too large to decode".into(),
        })?;
    if size as u64 > segtool_model_spec::images::MAX_DECODED_BYTES {
        let info = reader.info();
        return Err(DatasetError::TooLarge {
            path: path.into(),
            width: info.width,
            height: info.height,
            bytes: size as u64,
        });
    }
    let mut buf = vec![0; size];
    let info = reader.next_frame(&mut buf).map_err(png_err)?;
    let (w, h) = (info.width as usize, info.height as usize);
    let mut out = Vec::with_capacity(w * h);
    for row in buf.chunks(info.line_size).take(h) {
        match depth {
            BitDepth::Eight => out.extend_from_slice(&row[..w]),
            BitDepth::Sixteen => {
                for (x, px) in row.chunks_exact(2).take(w).enumerate() {
                    let v = u16::from_be_bytes([px[0], px[1]]);
                    let Ok(v) = u8::try_from(v) else {
                        return Err(DatasetError::MaskFormat {
                            path: path.into(),
                            format: format!(
                                "16-bit with value {v} at x={x}, which does not fit a u8 label"
                            ),
                        });
                    };
                    out.push(v);
                }
            }
            low => {
                let bits = low as usize;
                let per_byte = 8 / bits;
                let max = (1u8 << bits) - 1;
                out.extend((0..w).map(|x| {
                    let shift = 8 - bits * (x % per_byte + 1);
                    (row[x / per_byte] >> shift) & max
                }));
            }
        }
    }
    Ok(Some(
        GrayImage::from_raw(info.width, info.height, out).expect("one byte per pixel"),
    ))
}

/// Fails with [`DatasetError::MissingDir`] naming the first of `dirs` that is not a
/// directory, so users see which part of the layout is missing.
pub(crate) fn require_dirs(dirs: &[&Path]) -> Result<(), DatasetError> {
    match dirs.iter().find(|d| !d.is_dir()) {
        Some(d) => Err(DatasetError::MissingDir(d.to_path_buf())),
        None => Ok(()),
    }
}

/// The sample stems listed in a split file, one per line. Lines may also be the DeepLab
/// list format (`/JPEGImages/x.jpg /SegmentationClassAug/x.png`), in which case the
/// stem of the first path is used, so both common `train_aug.txt` flavours work.
pub(crate) fn read_split_list(path: &Path) -> Result<Vec<String>, DatasetError> {
    if !path.is_file() {
        return Err(DatasetError::MissingFile(path.into()));
    }
    let text = std::fs::read_to_string(path).map_err(|source| DatasetError::Io {
        path: path.into(),
        source,
    })?;
    let stems: Vec<String> = text
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(|first| {
            Path::new(first)
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| first.to_string())
        })
        .collect();
    if stems.is_empty() {
        return Err(DatasetError::Empty(path.into()));
    }
    Ok(stems)
}

/// `dir/<stem>.<ext>` for the first of `exts` that exists, or
/// [`DatasetError::MissingFile`] naming the first candidate.
pub(crate) fn find_file(dir: &Path, stem: &str, exts: &[&str]) -> Result<PathBuf, DatasetError> {
    exts.iter()
        .map(|ext| dir.join(format!("{stem}.{ext}")))
        .find(|p| p.is_file())
        .ok_or_else(|| DatasetError::MissingFile(dir.join(format!("{stem}.{}", exts[0]))))
}

/// The file stem of `path` as a `String`.
pub(crate) fn stem_of(path: &Path) -> String {
    path.file_stem()
        .unwrap_or_default()
        .to_string_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::testutil::{write_gray, write_image, write_indexed};

    #[test]
    fn indexed_png_reads_indices_not_colours() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("m.png");
        let palette = segtool_model_spec::palette::default_palette(256);
        write_indexed(&path, 3, 1, &[0, 15, 255], &palette);
        assert_eq!(read_mask(&path).unwrap().as_raw(), &[0, 15, 255]);
    }

    #[test]
    fn low_bit_depth_png_keeps_raw_values() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("m.png");
        let file = std::io::BufWriter::new(File::create(&path).unwrap());
        let mut encoder = png::Encoder::new(file, 5, 1);
        encoder.set_color(png::ColorType::Grayscale);
        encoder.set_depth(png::BitDepth::Two);
        let mut writer = encoder.write_header().unwrap();
        // 0,1,2,3 | 1 (padded)
        writer
            .write_image_data(&[0b00_01_10_11, 0b01_00_00_00])
            .unwrap();
        writer.finish().unwrap();
        assert_eq!(read_mask(&path).unwrap().as_raw(), &[0, 1, 2, 3, 1]);
    }

    #[test]
    fn out_of_range_label_names_file_and_value() {
        let tmp = tempfile::tempdir().unwrap();
        let (image, mask) = (tmp.path().join("a.png"), tmp.path().join("a_mask.png"));
        write_image(&image, 2, 1);
        write_gray(&mask, 2, 1, &[255, 7]);
        let ds = PairedDataset {
            pairs: vec![Pair {
                image,
                mask: mask.clone(),
                name: "a".into(),
                lut: None,
            }],
            num_classes: Some(5),
        };
        match ds.get(0) {
            Err(DatasetError::LabelOutOfRange {
                path,
                value: 7,
                num_classes: 5,
            }) => assert_eq!(path, mask),
            other => panic!("expected LabelOutOfRange, got {:?}", other.err()),
        }
        let msg = ds.get(0).err().unwrap().to_string();
        assert!(
            msg.contains("a_mask.png") && msg.contains("label 7"),
            "{msg}"
        );
    }
}
