//! DANet's dilated ResNet (layer4's output feeds the head), emitted from the checkpoint's
//! `pretrained.*` tensors. Geometry (stride, dilation per block, downsample branches)
//! comes only from `BackboneSpec`, so training, export and inference cannot disagree.

use segtool_model_spec::{BackboneSpec, BlockKind};

use crate::builder::attr_ints;
use crate::conv::{Conv2d, Ctx};
use crate::error::ExportError;

/// Emits the backbone on `image` and returns layer4's output value and, when `tap` names
/// a stage (1-based), that stage's output (the auxiliary head's input).
pub fn backbone_with_tap(
    ctx: &mut Ctx<'_, '_>,
    spec: &BackboneSpec,
    image: &str,
    tap: Option<usize>,
) -> Result<(String, Option<String>), ExportError> {
    let w = spec.width;
    ctx.annotate_feature(image, 3, 1);
    let x = stem(ctx, spec, image)?;
    let x = ctx.relu(&x, "pretrained.relu");
    let pool = vec![
        attr_ints("kernel_shape", &[3, 3]),
        attr_ints("strides", &[2, 2]),
        attr_ints("pads", &[1, 1, 1, 1]),
    ];
    let pooled = ctx.g.add_node("MaxPool", &[&x], pool, "pretrained.maxpool");
    ctx.derive_feature(&x, &pooled, spec.stem_channels(), 2);
    let mut x = pooled;

    let mut in_ch = spec.stem_channels();
    let mut tapped = None;
    for k in 1..=4 {
        let planes = w << (k - 1);
        for i in 0..spec.layers[k - 1] {
            let b = Block {
                spec,
                k,
                i,
                in_ch,
                planes,
                prefix: format!("pretrained.layer{k}.{i}"),
            };
            x = match spec.block {
                BlockKind::Basic => b.basic(ctx, &x)?,
                BlockKind::Bottleneck => b.bottleneck(ctx, &x)?,
            };
            in_ch = spec.layer_channels(k);
        }
        if tap == Some(k) {
            tapped = Some(x.clone());
        }
    }
    Ok((x, tapped))
}

/// The stem up to `bn1` (folded into the last conv), before its ReLU.
///
/// Plain: torchvision's 7x7 stride-2 `conv1`. Deep (`deep_stem`, PyTorch-Encoding's
/// `deep_base`): `conv1` is a Sequential of 3x3 convs — `conv1.0` (stride 2, 3 -> w) with
/// BN `conv1.1`, ReLU, `conv1.3` (w -> w) with BN `conv1.4`, ReLU, `conv1.6` (w -> 2w) —
/// and `bn1` normalises `conv1.6`'s 2w channels. The widths are
/// [`BackboneSpec::stem_conv_widths`] (mmsegmentation's ResNetV1c: 32, 32, 64).
fn stem(ctx: &mut Ctx<'_, '_>, spec: &BackboneSpec, image: &str) -> Result<String, ExportError> {
    if !spec.deep_stem {
        let c = Conv2d::new(3, spec.width, 7).stride(2).pad(3);
        return ctx.conv_bn(image, "pretrained.conv1", "pretrained.bn1", c);
    }
    let [w0, w1, w2] = spec.stem_conv_widths();
    let x = ctx.conv_bn(
        image,
        "pretrained.conv1.0",
        "pretrained.conv1.1",
        Conv2d::new(3, w0, 3).stride(2).dilated(1),
    )?;
    let x = ctx.relu(&x, "pretrained.conv1.2");
    let c = Conv2d::new(w0, w1, 3).dilated(1);
    let x = ctx.conv_bn(&x, "pretrained.conv1.3", "pretrained.conv1.4", c)?;
    let x = ctx.relu(&x, "pretrained.conv1.5");
    let c = Conv2d::new(w1, w2, 3).dilated(1);
    ctx.conv_bn(&x, "pretrained.conv1.6", "pretrained.bn1", c)
}

/// One residual block: its place in the network and its input width.
struct Block<'s> {
    spec: &'s BackboneSpec,
    k: usize,
    i: usize,
    in_ch: i64,
    planes: i64,
    prefix: String,
}

impl Block<'_> {
    fn key(&self, part: &str) -> String {
        format!("{}.{part}", self.prefix)
    }

    /// 1x1 -> 3x3 (stride, dilation) -> 1x1 (x4 channels), + shortcut, ReLU.
    fn bottleneck(&self, ctx: &mut Ctx<'_, '_>, x: &str) -> Result<String, ExportError> {
        let geom = self.spec.block(self.k, self.i);
        let (p, out) = (self.planes, self.planes * BlockKind::Bottleneck.expansion());
        let h = ctx.conv_bn(
            x,
            &self.key("conv1"),
            &self.key("bn1"),
            Conv2d::new(self.in_ch, p, 1),
        )?;
        let h = ctx.relu(&h, &self.key("relu1"));
        let c2 = Conv2d::new(p, p, 3)
            .stride(geom.stride)
            .dilated(geom.dilation);
        let h = ctx.conv_bn(&h, &self.key("conv2"), &self.key("bn2"), c2)?;
        let h = ctx.relu(&h, &self.key("relu2"));
        let h = ctx.conv_bn(
            &h,
            &self.key("conv3"),
            &self.key("bn3"),
            Conv2d::new(p, out, 1),
        )?;
        self.residual(ctx, x, &h, out, geom.stride)
    }

    /// 3x3 (stride, dilation) -> 3x3 (stage dilation), + shortcut, ReLU.
    fn basic(&self, ctx: &mut Ctx<'_, '_>, x: &str) -> Result<String, ExportError> {
        let geom = self.spec.block(self.k, self.i);
        let p = self.planes;
        let c1 = Conv2d::new(self.in_ch, p, 3)
            .stride(geom.stride)
            .dilated(geom.dilation);
        let h = ctx.conv_bn(x, &self.key("conv1"), &self.key("bn1"), c1)?;
        let h = ctx.relu(&h, &self.key("relu1"));
        let c2 = Conv2d::new(p, p, 3).dilated(geom.second_dilation);
        let h = ctx.conv_bn(&h, &self.key("conv2"), &self.key("bn2"), c2)?;
        self.residual(ctx, x, &h, p, geom.stride)
    }

    /// relu(h + shortcut(x)), the shortcut being identity or 1x1 conv (stride) + BN.
    fn residual(
        &self,
        ctx: &mut Ctx<'_, '_>,
        x: &str,
        h: &str,
        out: i64,
        stride: i64,
    ) -> Result<String, ExportError> {
        let shortcut = if self.spec.has_downsample(self.k, self.i) {
            let c = Conv2d::new(self.in_ch, out, 1).stride(stride);
            ctx.conv_bn(x, &self.key("downsample.0"), &self.key("downsample.1"), c)?
        } else {
            x.to_string()
        };
        let sum = ctx.add(h, &shortcut, &self.key("add"));
        Ok(ctx.relu(&sum, &self.prefix))
    }
}

#[cfg(test)]
mod tests {
    use segtool_model_spec::{BackboneSpec, BlockKind};

    use crate::testutil::{conv_attr, export_decoded, spec_with};

    #[test]
    fn tiny_basic_backbone_structure() {
        let (model, report) = export_decoded(&spec_with(BackboneSpec::tiny(), 3));
        let g = model.graph.expect("graph");
        let convs: Vec<_> = g
            .node
            .iter()
            .filter(|n| n.op_type == "Conv")
            .map(|n| n.name.as_str())
            .collect();
        // stem + 4 blocks x 2 + downsample in layers 2..4 (layer1 keeps width 16).
        assert!(convs.contains(&"pretrained.layer2.0.downsample.0"));
        assert!(!convs.contains(&"pretrained.layer1.0.downsample.0"));
        assert_eq!(
            convs
                .iter()
                .filter(|n| n.starts_with("pretrained."))
                .count(),
            12
        );
        assert_eq!(g.node.iter().filter(|n| n.op_type == "MaxPool").count(), 1);
        assert_eq!(
            g.node
                .iter()
                .filter(|n| n.op_type == "BatchNormalization")
                .count(),
            0
        );
        assert_eq!(report.folded_bn, 12 + 4);
        // OS8: layer3 stride 1, first-block dilation 1, second conv dilation 2.
        assert_eq!(
            conv_attr(&g, "pretrained.layer3.0.conv1", "strides"),
            [1, 1]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer3.0.conv1", "dilations"),
            [1, 1]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer3.0.conv2", "dilations"),
            [2, 2]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer4.0.conv1", "dilations"),
            [2, 2]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer4.0.conv2", "pads"),
            [4, 4, 4, 4]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer2.0.conv1", "strides"),
            [2, 2]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer2.0.downsample.0", "strides"),
            [2, 2]
        );
        assert_eq!(conv_attr(&g, "pretrained.conv1", "pads"), [3, 3, 3, 3]);
    }

    #[test]
    fn deep_stem_structure() {
        let b = BackboneSpec {
            deep_stem: true,
            stem_widths: None,
            contract_dilation: true,
            ..BackboneSpec::tiny()
        };
        let (model, report) = export_decoded(&spec_with(b, 3));
        let g = model.graph.expect("graph");
        assert_eq!(conv_attr(&g, "pretrained.conv1.0", "strides"), [2, 2]);
        assert_eq!(conv_attr(&g, "pretrained.conv1.0", "kernel_shape"), [3, 3]);
        assert_eq!(conv_attr(&g, "pretrained.conv1.3", "pads"), [1, 1, 1, 1]);
        assert_eq!(conv_attr(&g, "pretrained.conv1.6", "strides"), [1, 1]);
        assert!(!g.node.iter().any(|n| n.name == "pretrained.conv1"));
        // The stem ends at 2 x 16 channels: layer1's basic block (16) needs a projection.
        assert!(g
            .node
            .iter()
            .any(|n| n.name == "pretrained.layer1.0.downsample.0"));
        // 12 backbone BNs of the plain tiny model + 2 in the stem + layer1's downsample,
        // + 4 in the head.
        assert_eq!(report.folded_bn, 12 + 3 + 4);
    }

    #[test]
    fn bottleneck_os16_multigrid_structure() {
        let b = BackboneSpec {
            block: BlockKind::Bottleneck,
            layers: [1, 1, 2, 2],
            width: 4,
            output_stride: 16,
            multi_grid: Some(vec![3, 5]),
            deep_stem: false,
            stem_widths: None,
            contract_dilation: true,
        };
        let (model, report) = export_decoded(&spec_with(b, 2));
        let g = model.graph.expect("graph");
        // Every block has a downsample (channel change or stride) only in its first block.
        assert!(g
            .node
            .iter()
            .any(|n| n.name == "pretrained.layer1.0.downsample.0"));
        assert!(!g
            .node
            .iter()
            .any(|n| n.name == "pretrained.layer3.1.downsample.0"));
        assert_eq!(
            conv_attr(&g, "pretrained.layer3.0.conv2", "strides"),
            [2, 2]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer3.0.conv1", "strides"),
            [1, 1]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer4.0.conv2", "dilations"),
            [3, 3]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer4.1.conv2", "pads"),
            [5, 5, 5, 5]
        );
        assert_eq!(
            conv_attr(&g, "pretrained.layer4.1.conv3", "kernel_shape"),
            [1, 1]
        );
        // stem 1 + 6 blocks x 3 + 4 downsamples + head 4.
        assert_eq!(report.folded_bn, 1 + 18 + 4 + 4);
    }
}
