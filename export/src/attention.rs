//! DANet's two attention modules, decomposed into MatMul / Softmax / MatMul exactly as
//! DANet v0.5.0's `PAM_Module` / `CAM_Module` compute them (same operand order, no
//! 1/sqrt(d) scale), so runtimes reproduce PyTorch to float rounding.
//!
//! Each module can instead be emitted fused, per [`AttentionForm`]: ONNX `Attention`
//! (opset 23) or ONNX Runtime's `com.microsoft.MultiHeadAttention`, both with one head,
//! 3D (batch, tokens, hidden) inputs and scale 1, keeping the projections and the
//! `gamma * out + x` residual shared (see DESIGN.md: PAM is attention(Q, K, V) over N
//! positions, CAM is attention(-X, X, X) over C channels: softmax(rowmax(E) - E) equals
//! softmax(-E) since softmax ignores a per-row constant).
//!
//! Shapes stay dynamic: flattening uses Reshape to `[0, 0, -1]` (keep B and C, fold
//! H*W) and un-flattening reshapes to `Shape(x)`, so no size is baked into the graph.

use crate::builder::{attr_float, attr_int, attr_ints};
use crate::conv::{Conv2d, Ctx};
use crate::error::ExportError;
use crate::{AttentionForm, MS_DOMAIN};

mod blocked;

/// Query blocks of [`AttentionForm::QueryBlocked`] PAM: 1/16 of the N x N energy alive at
/// a time (64 MiB at 1024x1024, stride 8). Issue 15, ResNet-50 DANet at 1024x1024 in
/// tract 0.23.9, 2 threads, one run on a loaded machine (provisional): peak RSS 2.21 GB
/// blocked vs 3.20 GB with `Attention`-23, engine 141 s vs 249 s. Other counts untried.
pub const PAM_QUERY_BLOCKS: i64 = 16;

/// Fused single-head attention softmax(Q K^T) V (scale 1) on 3D (B, S, hidden) inputs;
/// V's hidden size may differ from Q/K's (both ops allow it). `form` is fused.
fn fused_attention(
    ctx: &mut Ctx<'_, '_>,
    form: AttentionForm,
    q: &str,
    k: &str,
    v: &str,
    out: &str,
) -> String {
    match form {
        AttentionForm::OnnxAttention => ctx.g.add_node(
            "Attention",
            &[q, k, v],
            vec![
                attr_int("q_num_heads", 1),
                attr_int("kv_num_heads", 1),
                attr_float("scale", 1.0),
            ],
            out,
        ),
        AttentionForm::MsMultiHeadAttention => ctx.g.add_node_in_domain(
            MS_DOMAIN,
            "MultiHeadAttention",
            &[q, k, v],
            vec![attr_int("num_heads", 1), attr_float("scale", 1.0)],
            out,
        ),
        AttentionForm::Decomposed | AttentionForm::QueryBlocked => {
            unreachable!("decomposed attention is not fused")
        }
    }
}

/// Reshape (B, C, H, W) -> (B, C, H*W).
fn flatten_spatial(ctx: &mut Ctx<'_, '_>, x: &str, out: &str) -> String {
    let target = ctx.g.const_i64(&[0, 0, -1]);
    ctx.g.add_node("Reshape", &[x, &target], vec![], out)
}

/// (B, M, K) -> (B, K, M).
pub(crate) fn transpose_last(ctx: &mut Ctx<'_, '_>, x: &str, out: &str) -> String {
    ctx.g
        .add_node("Transpose", &[x], vec![attr_ints("perm", &[0, 2, 1])], out)
}

pub(crate) fn softmax_last(ctx: &mut Ctx<'_, '_>, x: &str, out: &str) -> String {
    ctx.g
        .add_node("Softmax", &[x], vec![attr_int("axis", -1)], out)
}

/// `gamma * reshape(out, shape(x)) + x`: the learned-scale residual both modules end with.
fn gamma_residual(
    ctx: &mut Ctx<'_, '_>,
    prefix: &str,
    out: &str,
    x: &str,
) -> Result<String, ExportError> {
    let gamma = ctx.scalar_param(&format!("{prefix}.gamma"))?;
    let shape = ctx
        .g
        .add_node("Shape", &[x], vec![], &format!("{prefix}.in_shape"));
    let out = ctx
        .g
        .add_node("Reshape", &[out, &shape], vec![], &format!("{prefix}.out"));
    let scaled = ctx.mul(&gamma, &out, &format!("{prefix}.scaled"));
    Ok(ctx.add(&scaled, x, prefix))
}

/// Position attention (`head.sa`) on `x` (B, C, H, W) with C = `channels`:
/// energy = Q^T K (N x N), attention = softmax over the last axis, out = V attention^T.
///
/// Fused, it is attention(Q = query^T, K = key^T, V = value^T) over the N positions,
/// (B, N, C/8), (B, N, C/8), (B, N, C) -> (B, N, C), transposed back to (B, C, N).
pub fn pam(
    ctx: &mut Ctx<'_, '_>,
    x: &str,
    channels: i64,
    qk_channels: i64,
    form: AttentionForm,
) -> Result<String, ExportError> {
    let p = "head.sa";
    let q = ctx.conv_bias(
        x,
        &format!("{p}.query_conv"),
        Conv2d::new(channels, qk_channels, 1),
    )?;
    let k = ctx.conv_bias(
        x,
        &format!("{p}.key_conv"),
        Conv2d::new(channels, qk_channels, 1),
    )?;
    let v = ctx.conv_bias(
        x,
        &format!("{p}.value_conv"),
        Conv2d::new(channels, channels, 1),
    )?;
    let q = flatten_spatial(ctx, &q, &format!("{p}.query_flat")); // (B, C8, N)
    let q = transpose_last(ctx, &q, &format!("{p}.query_t")); // (B, N, C8)
    let k = flatten_spatial(ctx, &k, &format!("{p}.key_flat")); // (B, C8, N)
                                                                // Under fp16, Q, K and V enter attention as fp32 and the result leaves as fp16.
    if form == AttentionForm::QueryBlocked {
        let (q, k) = (ctx.attn_in(&q), ctx.attn_in(&k));
        let v = flatten_spatial(ctx, &v, &format!("{p}.value_flat")); // (B, C, N)
        let v = ctx.attn_in(&v);
        let out = blocked::pam_blocks(ctx, p, &q, &k, &v, PAM_QUERY_BLOCKS); // (B, C, N)
        let out = ctx.attn_out(&out);
        return gamma_residual(ctx, p, &out, x);
    }
    if form != AttentionForm::Decomposed {
        let k = transpose_last(ctx, &k, &format!("{p}.key_t")); // (B, N, C8)
        let v = flatten_spatial(ctx, &v, &format!("{p}.value_flat")); // (B, C, N)
        let v = transpose_last(ctx, &v, &format!("{p}.value_t")); // (B, N, C)
        let (q, k, v) = (ctx.attn_in(&q), ctx.attn_in(&k), ctx.attn_in(&v));
        let att = fused_attention(ctx, form, &q, &k, &v, &format!("{p}.attention")); // (B, N, C)
        let out = transpose_last(ctx, &att, &format!("{p}.matmul")); // (B, C, N)
        let out = ctx.attn_out(&out);
        return gamma_residual(ctx, p, &out, x);
    }
    let (q, k) = (ctx.attn_in(&q), ctx.attn_in(&k));
    let energy = ctx
        .g
        .add_node("MatMul", &[&q, &k], vec![], &format!("{p}.energy")); // (B, N, N)
    let attn = softmax_last(ctx, &energy, &format!("{p}.attention"));
    let v = flatten_spatial(ctx, &v, &format!("{p}.value_flat")); // (B, C, N)
    let v = ctx.attn_in(&v);
    let attn_t = transpose_last(ctx, &attn, &format!("{p}.attention_t"));
    let out = ctx
        .g
        .add_node("MatMul", &[&v, &attn_t], vec![], &format!("{p}.matmul")); // (B, C, N)
    let out = ctx.attn_out(&out);
    gamma_residual(ctx, p, &out, x)
}

/// Channel attention (`head.sc`) on `x` (B, C, H, W): energy = X X^T (C x C),
/// attention = softmax(rowmax(E) - E), out = attention X. No parameters but gamma.
///
/// Fused, it is attention(Q = -X, K = X, V = X) over the C channels as tokens of length N.
pub fn cam(ctx: &mut Ctx<'_, '_>, x: &str, form: AttentionForm) -> Result<String, ExportError> {
    let p = "head.sc";
    let xf = flatten_spatial(ctx, x, &format!("{p}.flat")); // (B, C, N)
    let xf = ctx.attn_in(&xf); // fp32 under fp16: C x C energies sum N products
    if !matches!(
        form,
        AttentionForm::Decomposed | AttentionForm::QueryBlocked
    ) {
        let q = ctx.g.add_node("Neg", &[&xf], vec![], &format!("{p}.query")); // (B, C, N)
        let out = fused_attention(ctx, form, &q, &xf, &xf, &format!("{p}.attention")); // (B, C, N)
        let out = ctx.attn_out(&out);
        return gamma_residual(ctx, p, &out, x);
    }
    let xt = transpose_last(ctx, &xf, &format!("{p}.flat_t")); // (B, N, C)
    let energy = ctx
        .g
        .add_node("MatMul", &[&xf, &xt], vec![], &format!("{p}.energy")); // (B, C, C)
    let row_max = reduce_max_last(ctx, &energy, &format!("{p}.energy_max"));
    let energy_new = ctx.g.add_node(
        "Sub",
        &[&row_max, &energy],
        vec![],
        &format!("{p}.energy_new"),
    );
    let attn = softmax_last(ctx, &energy_new, &format!("{p}.attention"));
    let out = ctx
        .g
        .add_node("MatMul", &[&attn, &xf], vec![], &format!("{p}.matmul")); // (B, C, N)
    let out = ctx.attn_out(&out);
    gamma_residual(ctx, p, &out, x)
}

/// ReduceMax over the last axis, keepdims. Opset 18 moved `axes` from an attribute to
/// an input; emit whichever form the target opset defines.
fn reduce_max_last(ctx: &mut Ctx<'_, '_>, x: &str, out: &str) -> String {
    if ctx.g.opset() >= 18 {
        let axes = ctx.g.const_i64(&[-1]);
        ctx.g
            .add_node("ReduceMax", &[x, &axes], vec![attr_int("keepdims", 1)], out)
    } else {
        ctx.g.add_node(
            "ReduceMax",
            &[x],
            vec![attr_ints("axes", &[-1]), attr_int("keepdims", 1)],
            out,
        )
    }
}

#[cfg(test)]
mod tests {
    use segtool_model_spec::BackboneSpec;

    use crate::testutil::{export_decoded_with, spec_with};
    use crate::ExportOptions;

    fn ops_with_prefix(g: &crate::proto::GraphProto, prefix: &str) -> Vec<String> {
        g.node
            .iter()
            .filter(|n| n.name.starts_with(prefix))
            .map(|n| n.op_type.clone())
            .collect()
    }

    #[test]
    fn pam_and_cam_decompose_as_in_danet() {
        let (model, _) = export_decoded_with(
            &spec_with(BackboneSpec::tiny(), 3),
            &ExportOptions::default(),
        );
        let g = model.graph.expect("graph");
        let pam = ops_with_prefix(&g, "head.sa");
        let expected_pam = [
            "Conv",
            "Conv",
            "Conv",
            "Reshape",
            "Transpose",
            "Reshape",
            "MatMul",
            "Softmax",
            "Reshape",
            "Transpose",
            "MatMul",
            "Shape",
            "Reshape",
            "Mul",
            "Add",
        ];
        assert_eq!(pam, expected_pam);
        let cam = ops_with_prefix(&g, "head.sc");
        let expected_cam = [
            "Reshape",
            "Transpose",
            "MatMul",
            "ReduceMax",
            "Sub",
            "Softmax",
            "MatMul",
            "Shape",
            "Reshape",
            "Mul",
            "Add",
        ];
        assert_eq!(cam, expected_cam);
        // energy = Q^T K: the transposed query comes first; out = V attention^T.
        let node = |n: &str| g.node.iter().find(|x| x.name == n).expect(n);
        assert_eq!(
            node("head.sa.energy").input,
            ["head.sa.query_t", "head.sa.key_flat"]
        );
        assert_eq!(
            node("head.sa.matmul").input,
            ["head.sa.value_flat", "head.sa.attention_t"]
        );
        assert_eq!(
            node("head.sc.energy_new").input,
            ["head.sc.energy_max", "head.sc.energy"]
        );
        assert_eq!(
            node("head.sc.matmul").input,
            ["head.sc.attention", "head.sc.flat"]
        );
        let rm = node("head.sc.energy_max");
        assert_eq!(rm.input.len(), 1);
        assert_eq!(
            rm.attribute
                .iter()
                .find(|a| a.name == "axes")
                .map(|a| a.ints.clone()),
            Some(vec![-1])
        );
        let sm = node("head.sa.attention");
        assert_eq!(sm.attribute[0].i, Some(-1));
    }

    #[test]
    fn reduce_max_takes_axes_input_from_opset_18() {
        let opts = ExportOptions::default().with_opset(18);
        let (model, _) = export_decoded_with(&spec_with(BackboneSpec::tiny(), 3), &opts);
        let g = model.graph.expect("graph");
        let rm = g
            .node
            .iter()
            .find(|x| x.name == "head.sc.energy_max")
            .expect("reducemax");
        assert_eq!(rm.input.len(), 2);
        assert!(rm.attribute.iter().all(|a| a.name != "axes"));
        let axes = g
            .initializer
            .iter()
            .find(|t| t.name == rm.input[1])
            .expect("axes");
        assert_eq!(axes.raw_data, (-1i64).to_le_bytes());
    }
}
