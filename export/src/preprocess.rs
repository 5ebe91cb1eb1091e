//! `--preprocess` exports: the graph takes uint8 NHWC RGB frames as a camera or decoder
//! gives them and normalises them itself, so the caller does no per-pixel work.

use segtool_model_spec::ModelSpec;

use crate::builder::{attr_int, attr_ints};
use crate::conv::Ctx;
use crate::proto::DataType;

/// `--preprocess`: uint8 NHWC RGB `image` -> Cast -> Transpose (NCHW) -> one Mul + Add
/// computing (x/255 - mean)/std = x * 1/(255 std) + (-mean/std), per channel.
pub fn preprocess(ctx: &mut Ctx<'_, '_>, spec: &ModelSpec, image: &str) -> String {
    let scale: Vec<f32> = (0..3)
        .map(|c| (1.0f64 / (255.0 * spec.std[c] as f64)) as f32)
        .collect();
    let shift: Vec<f32> = (0..3)
        .map(|c| (-(spec.mean[c] as f64) / spec.std[c] as f64) as f32)
        .collect();
    let g = &mut ctx.g;
    let scale = g.add_initializer_f32("preprocess.scale", &[1, 3, 1, 1], &scale);
    let shift = g.add_initializer_f32("preprocess.shift", &[1, 3, 1, 1], &shift);
    let x = g.add_node(
        "Cast",
        &[image],
        vec![attr_int("to", DataType::Float as i64)],
        "preprocess.float",
    );
    let x = g.add_node(
        "Transpose",
        &[&x],
        vec![attr_ints("perm", &[0, 3, 1, 2])],
        "preprocess.nchw",
    );
    let x = g.add_node("Mul", &[&x, &scale], vec![], "preprocess.scaled");
    g.add_node("Add", &[&x, &shift], vec![], "preprocess.normalised")
}
