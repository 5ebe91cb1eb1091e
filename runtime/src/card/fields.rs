//! The card's fields as one source gives them: every field optional, merged field by
//! field in [`super::resolve`].

use serde::Deserialize;

use super::{ChannelOrder, Dtype, Fit, Layout, OutputKind, Resample, ResizeFilter, Restore};

/// Every card field, each optional: what one source says.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::{preset, sidecar, CardRequest};
/// // What a sidecar `deeplab.segtool.toml` says; what it leaves out stays `None`.
/// let fields = sidecar::parse(
///     r#"
///     classes = ["background", "person"]
///     [output]
///     name = "out"
///     "#,
/// )?;
/// assert_eq!(fields.classes, Some(vec!["background".to_string(), "person".to_string()]));
/// assert_eq!(fields.input.mean, None);
/// // The rest from a preset (torchvision's transforms), then handed to the builder.
/// let fields = preset::fill(fields, preset::preset("torchvision")?);
/// assert_eq!(fields.input.shortest_edge, Some(520));
/// let request = CardRequest::new().fields(fields);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CardFields {
    /// The input's fields.
    #[serde(default)]
    pub input: InputFields,
    /// The output's fields.
    #[serde(default)]
    pub output: OutputFields,
    /// Class names.
    pub classes: Option<Vec<String>>,
    /// A class count, when there are no names (classes are then `class_0`, ...).
    pub num_classes: Option<usize>,
    /// One RGB colour per class (default: the VOC-style palette segtool uses).
    pub palette: Option<Vec<[u8; 3]>>,
}

/// [`InputCard`](super::InputCard)'s fields, each optional.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::{sidecar, CardFields, CardRequest, ChannelOrder, InputFields};
/// // What `--mean 123.675,116.28,103.53 --std 58.395,57.12,57.375 --scale 1 --bgr` give.
/// let input = InputFields {
///     mean: Some(vec![123.675, 116.28, 103.53]),
///     std: Some(vec![58.395, 57.12, 57.375]),
///     scale: Some(1.0),
///     channels: Some(ChannelOrder::Bgr),
///     ..InputFields::default()
/// };
/// // The same as a card file's `[input]` table.
/// let toml = r#"
///     [input]
///     mean = [123.675, 116.28, 103.53]
///     std = [58.395, 57.12, 57.375]
///     scale = 1.0
///     channels = "bgr"
///     "#;
/// assert_eq!(sidecar::parse(toml)?.input, input);
/// let request = CardRequest::new().fields(CardFields { input, ..CardFields::default() });
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct InputFields {
    /// [`super::InputCard::name`].
    pub name: Option<String>,
    /// [`super::InputCard::layout`].
    pub layout: Option<Layout>,
    /// [`super::InputCard::dtype`].
    pub dtype: Option<Dtype>,
    /// [`super::InputCard::channels`].
    pub channels: Option<ChannelOrder>,
    /// [`super::InputCard::scale`].
    pub scale: Option<f32>,
    /// [`super::InputCard::mean`].
    pub mean: Option<Vec<f32>>,
    /// [`super::InputCard::std`].
    pub std: Option<Vec<f32>>,
    /// [`super::InputCard::size`].
    pub size: Option<[usize; 2]>,
    /// [`super::InputCard::size_divisor`].
    pub size_divisor: Option<usize>,
    /// [`super::InputCard::fit`].
    pub fit: Option<Fit>,
    /// [`super::InputCard::keep_ratio`].
    pub keep_ratio: Option<[usize; 2]>,
    /// [`super::InputCard::min_short_side`].
    pub min_short_side: Option<usize>,
    /// [`super::InputCard::resize_filter`].
    pub resize_filter: Option<ResizeFilter>,
    /// [`super::InputCard::resample`].
    pub resample: Option<Resample>,
    /// [`super::InputCard::shortest_edge`].
    pub shortest_edge: Option<usize>,
    /// [`super::InputCard::longest_edge`].
    pub longest_edge: Option<usize>,
    /// [`super::InputCard::keep_aspect_ratio`].
    pub keep_aspect_ratio: Option<bool>,
    /// [`super::InputCard::ensure_multiple_of`].
    pub ensure_multiple_of: Option<usize>,
    /// [`super::InputCard::center_crop`].
    pub center_crop: Option<[usize; 2]>,
    /// [`super::InputCard::pad_size`].
    pub pad_size: Option<[usize; 2]>,
}

/// [`OutputCard`](super::OutputCard)'s fields, each optional.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::{sidecar, OutputFields, OutputKind};
/// // A text detector's one probability channel: class 1 above 0.3 (`--output-kind binary
/// // --threshold 0.3`, or a card file's `[output]` table).
/// let output = OutputFields {
///     name: Some("maps".into()),
///     kind: Some(OutputKind::Binary),
///     threshold: Some(0.3),
///     ..OutputFields::default()
/// };
/// let toml = r#"
///     [output]
///     name = "maps"
///     kind = "binary"
///     threshold = 0.3
///     "#;
/// assert_eq!(sidecar::parse(toml)?.output, output);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutputFields {
    /// [`super::OutputCard::name`].
    pub name: Option<String>,
    /// [`super::OutputCard::kind`].
    pub kind: Option<OutputKind>,
    /// [`super::OutputCard::align_corners`].
    pub align_corners: Option<bool>,
    /// [`super::OutputCard::threshold`].
    pub threshold: Option<f32>,
    /// [`super::OutputCard::restore`].
    pub restore: Option<Restore>,
    /// [`super::OutputCard::class_output`].
    pub class_output: Option<String>,
    /// [`super::OutputCard::mask_size`].
    pub mask_size: Option<[usize; 2]>,
}
