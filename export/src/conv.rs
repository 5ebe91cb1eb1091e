//! The export context (graph builder + checkpoint + counters) and the layer helpers the
//! backbone and head share: conv with folded BN, conv with bias, ReLU, Add, Mul.

mod split;

use std::collections::{BTreeSet, HashMap};

use crate::builder::{attr_int, attr_ints, FeatureShape, GraphBuilder};
use crate::error::ExportError;
use crate::fold::{fold_bn, BatchNorm, BN_EPS};
use crate::proto::{AttributeProto, DataType};
use crate::weights::Weights;

/// Everything a layer emitter needs: where nodes go, where weights come from.
pub struct Ctx<'a, 'data> {
    pub g: GraphBuilder,
    pub w: Weights<'a, 'data>,
    /// BatchNorms folded so far (reported to the user).
    pub folded_bn: usize,
    /// Weights stored as FLOAT16 and the network computed in fp16 (`--fp16`); attention
    /// energies and softmax still run in fp32 (see [`Ctx::attn_in`]).
    pub fp16: bool,
    /// Under `fp16`: module names whose convs stay float32 (see
    /// [`crate::ExportOptions::keep_fp32`]).
    pub keep_fp32: Vec<String>,
    /// Every conv emitted (checkpoint key of its module), in graph order.
    pub convs: Vec<String>,
    /// Convs deeper than this (`in_ch x k x k`) are split along their input channels
    /// ([`split`]); `None`: every conv whole.
    pub conv_split_depth: Option<usize>,
    /// `keep_fp32` entries that selected at least one conv.
    pub kept_matched: BTreeSet<String>,
    /// FLOAT16 values that are a Cast of a float32 value (the fp32 islands' outputs):
    /// code that needs float32 again reads the source instead of casting back.
    fp32_source: HashMap<String, String>,
}

/// Whether module `name` (a `keep_fp32` entry) selects the conv `conv`: equal, or an
/// ancestor module (`head.conv5c` selects `head.conv5c.0`).
pub fn selects(name: &str, conv: &str) -> bool {
    conv == name || (conv.starts_with(name) && conv[name.len()..].starts_with('.'))
}

/// A square 2-D convolution's geometry (PyTorch `Conv2d` arguments, groups = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2d {
    pub in_ch: i64,
    pub out_ch: i64,
    pub kernel: i64,
    pub stride: i64,
    pub dilation: i64,
    pub pad: i64,
}

impl Conv2d {
    pub fn new(in_ch: i64, out_ch: i64, kernel: i64) -> Self {
        Self {
            in_ch,
            out_ch,
            kernel,
            stride: 1,
            dilation: 1,
            pad: 0,
        }
    }

    pub fn stride(self, stride: i64) -> Self {
        Self { stride, ..self }
    }

    pub fn pad(self, pad: i64) -> Self {
        Self { pad, ..self }
    }

    /// Dilation with the "same" padding ResNet uses for its 3x3 convs: pad = dilation.
    pub fn dilated(self, dilation: i64) -> Self {
        Self {
            dilation,
            pad: dilation * (self.kernel - 1) / 2,
            ..self
        }
    }

    /// PyTorch weight layout `[out, in, k, k]`.
    pub fn weight_shape(&self) -> [usize; 4] {
        [
            self.out_ch as usize,
            self.in_ch as usize,
            self.kernel as usize,
            self.kernel as usize,
        ]
    }

    fn weight_dims(&self) -> [i64; 4] {
        [self.out_ch, self.in_ch, self.kernel, self.kernel]
    }

    /// ONNX Conv attributes; every one written explicitly so no runtime default applies.
    pub fn attrs(&self) -> Vec<AttributeProto> {
        let (k, s, d, p) = (self.kernel, self.stride, self.dilation, self.pad);
        vec![
            attr_ints("kernel_shape", &[k, k]),
            attr_ints("strides", &[s, s]),
            attr_ints("pads", &[p, p, p, p]),
            attr_ints("dilations", &[d, d]),
            attr_int("group", 1),
        ]
    }
}

impl<'a, 'data> Ctx<'a, 'data> {
    pub fn new(g: GraphBuilder, w: Weights<'a, 'data>) -> Self {
        Self {
            g,
            w,
            folded_bn: 0,
            fp16: false,
            keep_fp32: Vec::new(),
            convs: Vec::new(),
            conv_split_depth: None,
            kept_matched: BTreeSet::new(),
            fp32_source: HashMap::new(),
        }
    }

    /// Whether the conv `conv` stays float32 in an fp16 export (records the match).
    fn keeps_fp32(&mut self, conv: &str) -> bool {
        if !self.fp16 {
            return false;
        }
        let hits: Vec<String> = self
            .keep_fp32
            .iter()
            .filter(|k| selects(k, conv))
            .cloned()
            .collect();
        let keep = !hits.is_empty();
        self.kept_matched.extend(hits);
        keep
    }

    /// The FLOAT16 Casts out of fp32 islands.
    pub fn island_casts(&self) -> std::collections::HashSet<String> {
        self.fp32_source.keys().cloned().collect()
    }

    /// `x` as float32: the float32 source of an island's output, else `Cast(x)` named
    /// `out`.
    pub fn to_fp32(&mut self, x: &str, out: &str) -> String {
        match self.fp32_source.get(x) {
            Some(src) => src.clone(),
            None => self.cast(x, DataType::Float, out),
        }
    }

    /// `bn(conv(x))` as one Conv: reads `{conv}.weight` and the BN at `bn`, writes the
    /// folded pair as `{conv}.weight` / `{conv}.bias`; the output value is named `conv`.
    pub fn conv_bn(
        &mut self,
        x: &str,
        conv: &str,
        bn: &str,
        c: Conv2d,
    ) -> Result<String, ExportError> {
        let weight = self.w.f32(&format!("{conv}.weight"), &c.weight_shape())?;
        let bn = BatchNorm::load(&self.w, bn, c.out_ch as usize)?;
        let (wf, bf) = fold_bn(&weight, None, &bn, BN_EPS);
        self.folded_bn += 1;
        self.emit_conv(x, conv, c, &wf, &bf)
    }

    /// `conv(x)` for a conv that has its own bias (`{conv}.weight`, `{conv}.bias`).
    pub fn conv_bias(&mut self, x: &str, conv: &str, c: Conv2d) -> Result<String, ExportError> {
        let weight = self.w.f32(&format!("{conv}.weight"), &c.weight_shape())?;
        let bias = self.w.f32(&format!("{conv}.bias"), &[c.out_ch as usize])?;
        self.emit_conv(x, conv, c, &weight, &bias)
    }

    fn emit_conv(
        &mut self,
        x: &str,
        conv: &str,
        c: Conv2d,
        w: &[f32],
        b: &[f32],
    ) -> Result<String, ExportError> {
        self.convs.push(conv.to_string());
        // "Same" padding: a side of n becomes ceil(n / stride).
        let same = 2 * c.pad == c.dilation * (c.kernel - 1);
        if self.keeps_fp32(conv) {
            // An fp32 island: Cast in, float32 weights and Conv (its output keeps the
            // conv's name, as in an fp32 export), Cast back to FLOAT16.
            let x32 = self.to_fp32(x, &format!("{x}_fp32"));
            let wn = self
                .g
                .add_initializer_f32(&format!("{conv}.weight"), &c.weight_dims(), w);
            let bn = self
                .g
                .add_initializer_f32(&format!("{conv}.bias"), &[c.out_ch], b);
            let y32 = self.g.add_node("Conv", &[&x32, &wn, &bn], c.attrs(), conv);
            let y = self.cast(&y32, DataType::Float16, &format!("{conv}_fp16"));
            if let (true, Some(f)) = (same, self.g.feature(x)) {
                let shape = |dtype| FeatureShape {
                    channels: c.out_ch,
                    stride: f.stride * c.stride,
                    dtype,
                };
                self.g.annotate_feature(&y32, shape(DataType::Float));
                self.g.annotate_feature(&y, shape(DataType::Float16));
            }
            self.fp32_source.insert(y.clone(), y32);
            return Ok(y);
        }
        let split = self.conv_split_depth.and_then(|d| split::groups(&c, d));
        let y = match split {
            Some(groups) => self.emit_split_conv(x, conv, c, w, b, groups),
            None => {
                let wn = self.float_init(&format!("{conv}.weight"), &c.weight_dims(), w);
                let bn = self.float_init(&format!("{conv}.bias"), &[c.out_ch], b);
                self.g.add_node("Conv", &[x, &wn, &bn], c.attrs(), conv)
            }
        };
        if same {
            self.derive_feature(x, &y, c.out_ch, c.stride);
        }
        Ok(y)
    }

    /// Records `x` as a feature map of `channels` at `stride` (the network input: 1).
    pub fn annotate_feature(&mut self, x: &str, channels: i64, stride: i64) {
        let dtype = if self.fp16 {
            DataType::Float16
        } else {
            DataType::Float
        };
        self.g.annotate_feature(
            x,
            FeatureShape {
                channels,
                stride,
                dtype,
            },
        );
    }

    /// Records `y` = a "same"-padded op of stride `stride` with `channels` outputs on the
    /// feature map `x` (nothing when `x`'s shape is unknown).
    pub fn derive_feature(&mut self, x: &str, y: &str, channels: i64, stride: i64) {
        if let Some(f) = self.g.feature(x) {
            self.annotate_feature(y, channels, f.stride * stride);
        }
    }

    /// Records `y` with the shape of `x` (elementwise ops).
    fn same_feature(&mut self, x: &str, y: &str) {
        if let Some(f) = self.g.feature(x) {
            self.g.annotate_feature(y, f);
        }
    }

    /// A scalar-like f32 parameter stored with shape `[1]` (DANet's `gamma`s).
    pub fn scalar_param(&mut self, key: &str) -> Result<String, ExportError> {
        let v = self.w.f32(key, &[1])?;
        Ok(self.float_init(key, &[1], &v))
    }

    /// A network parameter: float32, or FLOAT16 (round to nearest even) under `fp16`.
    fn float_init(&mut self, name: &str, dims: &[i64], data: &[f32]) -> String {
        if self.fp16 {
            self.g.add_initializer_f16(name, dims, data)
        } else {
            self.g.add_initializer_f32(name, dims, data)
        }
    }

    /// `Cast(x, to)`.
    pub fn cast(&mut self, x: &str, to: DataType, out: &str) -> String {
        self.g
            .add_node("Cast", &[x], vec![attr_int("to", to as i64)], out)
    }

    /// Into attention: under `fp16`, Cast to float32 (DANet's unscaled energies overflow
    /// fp16, so energies and softmax stay fp32); otherwise `x` itself.
    pub fn attn_in(&mut self, x: &str) -> String {
        if self.fp16 {
            self.to_fp32(x, &format!("{x}_fp32"))
        } else {
            x.to_string()
        }
    }

    /// Out of attention: under `fp16`, Cast back to FLOAT16; otherwise `x` itself.
    pub fn attn_out(&mut self, x: &str) -> String {
        if self.fp16 {
            self.cast(x, DataType::Float16, &format!("{x}_fp16"))
        } else {
            x.to_string()
        }
    }

    pub fn relu(&mut self, x: &str, out: &str) -> String {
        let y = self.g.add_node("Relu", &[x], vec![], out);
        self.same_feature(x, &y);
        y
    }

    /// `a + b` without broadcasting between feature maps: the output has the shape of
    /// whichever operand is a known feature map.
    pub fn add(&mut self, a: &str, b: &str, out: &str) -> String {
        let y = self.g.add_node("Add", &[a, b], vec![], out);
        self.same_feature(a, &y);
        self.same_feature(b, &y);
        y
    }

    pub fn mul(&mut self, a: &str, b: &str, out: &str) -> String {
        self.g.add_node("Mul", &[a, b], vec![], out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dilated_three_by_three_keeps_size() {
        let c = Conv2d::new(8, 16, 3).stride(2).dilated(4);
        assert_eq!((c.stride, c.dilation, c.pad), (2, 4, 4));
        assert_eq!(Conv2d::new(8, 16, 1).dilated(1).pad, 0);
        assert_eq!(c.weight_shape(), [16, 8, 3, 3]);
        let a = c.attrs();
        let get = |n: &str| a.iter().find(|x| x.name == n).map(|x| x.ints.clone());
        assert_eq!(get("pads"), Some(vec![4, 4, 4, 4]));
        assert_eq!(get("dilations"), Some(vec![4, 4]));
        assert_eq!(get("strides"), Some(vec![2, 2]));
        assert_eq!(get("kernel_shape"), Some(vec![3, 3]));
    }
}
