//! PAM split along the query axis ([`AttentionForm::QueryBlocked`]): for each block of
//! query rows, energy = Q_b K (b x N), softmax over all N keys, out_b = attention_b V^T;
//! the blocks' outputs are concatenated back in query order. Every row's softmax and
//! sums are those of the unblocked form, so the result is the same to float rounding,
//! while a runtime that frees each block's energy after use holds 1/blocks of the
//! N x N matrix at a time (tract does: its plans free a tensor after its last use).
//!
//! N stays dynamic: the block length is ceil(N / blocks), computed in the graph from
//! `Shape(Q)`, and each block is a Slice `[i * len, (i + 1) * len)` (Slice clamps the end;
//! when N < blocks the trailing blocks are empty).
//!
//! [`AttentionForm::QueryBlocked`]: crate::AttentionForm::QueryBlocked

use crate::builder::attr_int;
use crate::conv::Ctx;

use super::{softmax_last, transpose_last};

/// `q` (B, N, C8), `k` (B, C8, N), `v` (B, C, N) -> softmax(q k) v^T transposed, (B, C, N),
/// in `blocks` query blocks.
pub(super) fn pam_blocks(
    ctx: &mut Ctx<'_, '_>,
    p: &str,
    q: &str,
    k: &str,
    v: &str,
    blocks: i64,
) -> String {
    let shape = ctx
        .g
        .add_node("Shape", &[q], vec![], &format!("{p}.query_shape"));
    let axis1 = ctx.g.const_i64(&[1]);
    let n = ctx.g.add_node(
        "Gather",
        &[&shape, &axis1],
        vec![attr_int("axis", 0)],
        &format!("{p}.positions"),
    ); // [N]
    let round_up = ctx.g.const_i64(&[blocks - 1]);
    let n_up = ctx.g.add_node(
        "Add",
        &[&n, &round_up],
        vec![],
        &format!("{p}.positions_up"),
    );
    let count = ctx.g.const_i64(&[blocks]);
    let len = ctx
        .g
        .add_node("Div", &[&n_up, &count], vec![], &format!("{p}.block_len")); // ceil(N / blocks)
    let vt = transpose_last(ctx, v, &format!("{p}.value_t")); // (B, N, C)
    let mut bounds = Vec::with_capacity(blocks as usize + 1);
    for i in 0..=blocks {
        let idx = ctx.g.const_i64(&[i]);
        bounds.push(
            ctx.g
                .add_node("Mul", &[&len, &idx], vec![], &format!("{p}.block{i}_start")),
        );
    }
    let mut outs = Vec::with_capacity(blocks as usize);
    for i in 0..blocks as usize {
        let b = format!("{p}.block{i}");
        let qi = ctx.g.add_node(
            "Slice",
            &[q, &bounds[i], &bounds[i + 1], &axis1],
            vec![],
            &format!("{b}.query"),
        ); // (B, b, C8)
        let energy = ctx
            .g
            .add_node("MatMul", &[&qi, k], vec![], &format!("{b}.energy")); // (B, b, N)
        let attn = softmax_last(ctx, &energy, &format!("{b}.attention"));
        outs.push(
            ctx.g
                .add_node("MatMul", &[&attn, &vt], vec![], &format!("{b}.out")), // (B, b, C)
        );
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    let cat = ctx.g.add_node(
        "Concat",
        &refs,
        vec![attr_int("axis", 1)],
        &format!("{p}.blocks"),
    ); // (B, N, C)
    transpose_last(ctx, &cat, &format!("{p}.matmul")) // (B, C, N)
}
