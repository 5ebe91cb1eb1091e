//! DANetHead at inference: two branches (PAM, CAM) from layer4's features, summed, then
//! conv8 (Dropout2d is the identity in eval mode) and a bilinear resize to the input size
//! (align_corners as the spec says). conv6/conv7 only feed the auxiliary training losses
//! and are not exported; mmsegmentation's auxiliary FCN head only when asked.

use segtool_model_spec::ModelSpec;

use crate::attention;
use crate::builder::{attr_int, attr_string};
use crate::conv::{Conv2d, Ctx};
use crate::error::ExportError;
use crate::ExportOptions;

/// A `head.{name}` Sequential(Conv2d 3x3 pad 1 no bias, BN, ReLU), BN folded.
fn conv_bn_relu(
    ctx: &mut Ctx<'_, '_>,
    x: &str,
    name: &str,
    in_ch: i64,
    out_ch: i64,
) -> Result<String, ExportError> {
    let key = format!("head.{name}");
    let y = ctx.conv_bn(
        x,
        &format!("{key}.0"),
        &format!("{key}.1"),
        Conv2d::new(in_ch, out_ch, 3).pad(1),
    )?;
    Ok(ctx.relu(&y, &key))
}

/// Emits the head on `feat` (layer4's output) and returns conv8's logits at feature
/// resolution.
/// The attention modules take the forms `opts` asks for.
pub fn head(
    ctx: &mut Ctx<'_, '_>,
    spec: &ModelSpec,
    feat: &str,
    opts: &ExportOptions,
) -> Result<String, ExportError> {
    let (in_ch, inter) = (spec.backbone.out_channels(), spec.inter_channels());
    let sa = conv_bn_relu(ctx, feat, "conv5a", in_ch, inter)?;
    let sa = attention::pam(ctx, &sa, inter, spec.qk_channels(), opts.pam)?;
    // conv51 stays whole: tract pushes a channel split of its input up through PAM's
    // query blocks, splitting each block's value product in two halves that run far
    // apart, so every block's attention stays alive (all of N x N: 1.7 GB peak at
    // 1024x1024 against 0.9 GB).
    let split = ctx.conv_split_depth.take();
    let sa = conv_bn_relu(ctx, &sa, "conv51", inter, inter)?;
    ctx.conv_split_depth = split;

    let sc = conv_bn_relu(ctx, feat, "conv5c", in_ch, inter)?;
    let sc = attention::cam(ctx, &sc, opts.cam)?;
    let sc = conv_bn_relu(ctx, &sc, "conv52", inter, inter)?;

    let sum = ctx.add(&sa, &sc, "head.feat_sum");
    ctx.conv_bias(
        &sum,
        "head.conv8.1",
        Conv2d::new(inter, spec.num_classes() as i64, 1),
    )
}

/// mmsegmentation's auxiliary FCN head (`auxlayer.conv5.{0,1,4}`) on the tapped stage:
/// 3x3 conv + BN (folded) + ReLU, then the 1x1 classifier, at feature resolution.
pub fn aux_head(
    ctx: &mut Ctx<'_, '_>,
    spec: &ModelSpec,
    feat: &str,
) -> Result<Option<String>, ExportError> {
    let Some(aux) = &spec.aux_head else {
        return Ok(None);
    };
    let in_ch = spec.backbone.layer_channels(aux.in_layer);
    let y = ctx.conv_bn(
        feat,
        "auxlayer.conv5.0",
        "auxlayer.conv5.1",
        Conv2d::new(in_ch, aux.channels, 3).pad(1),
    )?;
    let y = ctx.relu(&y, "auxlayer.conv5.2");
    let classes = spec.num_classes() as i64;
    let c = Conv2d::new(aux.channels, classes, 1);
    Ok(Some(ctx.conv_bias(&y, "auxlayer.conv5.4", c)?))
}

/// Resizes `x` (B, K, h, w) bilinearly to `image`'s H and W into the pre-claimed value
/// `out`, as PyTorch's `interpolate(mode="bilinear", align_corners=...)`: ONNX's
/// `align_corners`, or `pytorch_half_pixel` for align_corners=False (half-pixel centres,
/// as PyTorch also for a one-pixel output).
///
/// `sizes` is computed in the graph — Shape(x)[0:2] ++ Shape(image)[2:4] — so batch and
/// image size stay dynamic; roi and scales are omitted (empty names), as Resize allows
/// when `sizes` is given.
pub fn upsample_into(ctx: &mut Ctx<'_, '_>, x: &str, image: &str, out: &str, align_corners: bool) {
    let g = &mut ctx.g;
    let axis0 = g.const_i64(&[0]);
    let (start_bc, end_bc) = (g.const_i64(&[0]), g.const_i64(&[2]));
    let (start_hw, end_hw) = (g.const_i64(&[2]), g.const_i64(&[4]));
    let x_shape = g.add_node("Shape", &[x], vec![], "resize.logits_shape");
    let bc = g.add_node(
        "Slice",
        &[&x_shape, &start_bc, &end_bc, &axis0],
        vec![],
        "resize.batch_classes",
    );
    let img_shape = g.add_node("Shape", &[image], vec![], "resize.image_shape");
    let hw = g.add_node(
        "Slice",
        &[&img_shape, &start_hw, &end_hw, &axis0],
        vec![],
        "resize.image_hw",
    );
    let sizes = g.add_node(
        "Concat",
        &[&bc, &hw],
        vec![attr_int("axis", 0)],
        "resize.sizes",
    );
    let attrs = vec![
        attr_string("mode", "linear"),
        attr_string(
            "coordinate_transformation_mode",
            if align_corners {
                "align_corners"
            } else {
                "pytorch_half_pixel"
            },
        ),
    ];
    g.add_node_into("Resize", &[x, "", "", &sizes], attrs, out);
}

#[cfg(test)]
mod tests {
    use segtool_model_spec::BackboneSpec;

    use crate::testutil::{export_decoded, random_entries, serialize, spec_with};

    /// Every feature map from the image to conv8 gets a shape, and a residual Add's two
    /// operands always get the same one (what lets ONNX Runtime fuse it into the conv).
    #[test]
    fn feature_shapes_reach_conv8_and_match_at_every_add() {
        use crate::builder::GraphBuilder;
        use crate::conv::Ctx;
        use crate::weights::Weights;
        use segtool_model_spec::BlockKind;
        let b = BackboneSpec {
            block: BlockKind::Bottleneck,
            layers: [1, 2, 2, 2],
            width: 4,
            output_stride: 8,
            multi_grid: None,
            deep_stem: false,
            stem_widths: None,
            contract_dilation: true,
        };
        let spec = spec_with(b, 5);
        let bytes = serialize(&random_entries(&spec, 3), Some(&spec));
        let st = safetensors::SafeTensors::deserialize(&bytes).expect("st");
        let mut ctx = Ctx::new(GraphBuilder::new(17), Weights::new(&st));
        let image = ctx.g.unique("image");
        let feat = crate::backbone::backbone_with_tap(&mut ctx, &spec.backbone, &image, None)
            .expect("bb")
            .0;
        let opts = crate::ExportOptions::for_target(crate::ExportTarget::Ort);
        let low = super::head(&mut ctx, &spec, &feat, &opts).expect("head");
        let f = |n: &str| {
            ctx.g
                .feature(n)
                .unwrap_or_else(|| panic!("no shape for {n}"))
        };
        assert_eq!((f(&image).channels, f(&image).stride), (3, 1));
        assert_eq!(f("pretrained.maxpool").stride, 4);
        assert_eq!(
            (f(&feat).channels, f(&feat).stride),
            (spec.backbone.out_channels(), 8)
        );
        assert_eq!((f(&low).channels, f(&low).stride), (5, 8));
        assert_eq!(f("head.sa"), f("head.sc"));
        use crate::proto::Dim;
        let vi: std::collections::HashMap<_, _> = ctx
            .g
            .feature_value_info(Dim::Named("b"), Dim::Named("h"), Dim::Named("w"), &[])
            .into_iter()
            .map(|v| (v.name.clone(), v))
            .collect();
        let (nodes, _) = ctx.g.finish();
        let mut adds = 0;
        for n in nodes.iter().filter(|n| n.op_type == "Add") {
            let (a, b) = (&vi.get(&n.input[0]), &vi.get(&n.input[1]));
            if n.name.starts_with("pretrained.") || n.name == "head.feat_sum" {
                adds += 1;
                let (a, b) = (a.expect(&n.input[0]), b.expect(&n.input[1]));
                assert_eq!(a.r#type, b.r#type, "{}", n.name);
                assert_eq!(vi[&n.output[0]].r#type, a.r#type, "{}", n.name);
            }
        }
        // 7 residual blocks + the branch sum.
        assert_eq!(adds, 8);
    }

    #[test]
    fn head_sums_branches_and_resizes_with_dynamic_sizes() {
        let (model, report) = export_decoded(&spec_with(BackboneSpec::tiny(), 5));
        let g = model.graph.expect("graph");
        let node = |n: &str| {
            g.node
                .iter()
                .find(|x| x.name == n)
                .unwrap_or_else(|| panic!("no node {n}"))
        };
        assert_eq!(node("head.feat_sum").input, ["head.conv51", "head.conv52"]);
        assert_eq!(node("head.conv8.1").input[0], "head.feat_sum");
        let conv8_w = g
            .initializer
            .iter()
            .find(|t| t.name == "head.conv8.1.weight")
            .expect("conv8");
        assert_eq!(conv8_w.dims, [5, 32, 1, 1]); // tiny: 128 channels out of layer4, inter 32
        assert!(!g
            .initializer
            .iter()
            .any(|t| t.name.contains("conv6") || t.name.contains("conv7")));
        let resize = g.node.last().expect("nodes");
        assert_eq!(resize.op_type, "Resize");
        assert_eq!(resize.output, ["logits"]);
        assert_eq!(resize.input, ["head.conv8.1", "", "", "resize.sizes"]);
        let attr = |n: &str| {
            resize
                .attribute
                .iter()
                .find(|a| a.name == n)
                .and_then(|a| a.s.clone())
        };
        assert_eq!(attr("mode").as_deref(), Some(&b"linear"[..]));
        assert_eq!(
            attr("coordinate_transformation_mode").as_deref(),
            Some(&b"align_corners"[..])
        );
        assert_eq!(
            node("resize.sizes").input,
            ["resize.batch_classes", "resize.image_hw"]
        );
        assert_eq!(node("resize.image_shape").input, ["image"]);
        // conv5a, conv5c, conv51, conv52.
        assert!(report.folded_bn >= 4);
    }
}
