//! What a state dict's names and shapes say about the network that wrote it: ResNet depth
//! and block type, width, stem, class count. Output stride and multi-grid are dilations,
//! which leave no trace in the weights; the caller supplies them.
//!
//! Names are read as DANet v0.5.0 writes them (`pretrained.conv1.weight`,
//! `pretrained.layerK.I.conv1.weight`, `head.conv8.1.bias`) or as torchvision does
//! (`conv1.weight`, `layerK.I.*`), after stripping `module.` prefixes.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use segtool_model_spec::{BackboneSpec, BlockKind};

use super::{is_torchvision, strip_module, StateDict};

/// The architecture a state dict determines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InferredArchitecture {
    pub block: BlockKind,
    /// Blocks in layer1..layer4: how many `layerK.I` indices the file has.
    pub layers: [usize; 4],
    /// Planes of layer1 (`layer1.0.conv1.weight`'s output channels); 64 in the released
    /// models.
    pub width: i64,
    /// PyTorch-Encoding's `deep_base` stem (`conv1.0.weight` present), else the 7x7 conv.
    pub deep_stem: bool,
    /// Length of the classifier's bias (`head.conv8.1.bias`); `None` for a file without a
    /// DANet head (an ImageNet ResNet).
    pub classes: Option<usize>,
    /// Where the ResNet's tensors are: `"pretrained."` (DANet) or `""` (torchvision).
    pub prefix: &'static str,
}

impl InferredArchitecture {
    /// The preset with these blocks (`resnet18` .. `resnet152`, or `tiny` with its width
    /// 16), if any. Depth names do not fix the width: a width-reduced ResNet-101 is still
    /// `resnet101`.
    pub fn preset(&self) -> Option<String> {
        let tiny = BackboneSpec::tiny();
        if (self.block, self.layers, self.width) == (tiny.block, tiny.layers, tiny.width) {
            return Some("tiny".into());
        }
        [18, 34, 50, 101, 152].into_iter().find_map(|depth| {
            let b = BackboneSpec::resnet(depth, 8)?;
            ((b.block, b.layers) == (self.block, self.layers)).then(|| format!("resnet{depth}"))
        })
    }

    /// The preset name, else one spelling out the blocks, e.g. `resnet-bottleneck-3-4-5-3`.
    pub fn name(&self) -> String {
        self.preset().unwrap_or_else(|| {
            let [a, b, c, d] = self.layers;
            format!("resnet-{}-{a}-{b}-{c}-{d}", block_name(self.block))
        })
    }

    /// One line for a user: `resnet101: bottleneck blocks [3, 4, 23, 3], width 64, 7x7 stem`.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} blocks {:?}, width {}, {}",
            self.name(),
            block_name(self.block),
            self.layers,
            self.width,
            if self.deep_stem {
                "deep stem (three 3x3 convs)"
            } else {
                "7x7 stem"
            }
        )
    }

    /// The backbone, with the dilations the weights cannot tell.
    pub fn backbone(&self, output_stride: i64, multi_grid: Option<Vec<i64>>) -> BackboneSpec {
        BackboneSpec {
            block: self.block,
            layers: self.layers,
            width: self.width,
            output_stride,
            multi_grid,
            deep_stem: self.deep_stem,
            stem_widths: None,
            contract_dilation: true,
        }
    }

    /// Fails, naming both, when the backbone preset `name` (`preset`, its spec) has other
    /// blocks than the file: a preset name is a depth and block type. Width and stem are
    /// not checked (the name does not fix them), except `tiny`'s width.
    pub fn check_preset(&self, name: &str, preset: &BackboneSpec) -> Result<()> {
        let width_fixed = name == "tiny";
        if (preset.block, preset.layers) != (self.block, self.layers)
            || (width_fixed && preset.width != self.width)
        {
            let width = if width_fixed {
                format!(", width {}", preset.width)
            } else {
                String::new()
            };
            bail!(
                "{name} has {} blocks {:?}{width}, but the file holds {} (counted from its `{}layerK.I` tensors)",
                block_name(preset.block),
                preset.layers,
                self.describe(),
                self.prefix
            );
        }
        Ok(())
    }
}

fn block_name(block: BlockKind) -> &'static str {
    match block {
        BlockKind::Basic => "basic",
        BlockKind::Bottleneck => "bottleneck",
    }
}

/// Reads the architecture from the names and shapes of `state`. Errors name the tensor
/// that is missing or has an unexpected shape when the file is not a recognisable
/// ResNet / DANet. Only what determines the architecture is checked here; every other
/// tensor's shape is checked by [`super::import_into`] against the model built from it.
pub fn infer_architecture(state: &StateDict) -> Result<InferredArchitecture> {
    let shapes: BTreeMap<&str, Vec<i64>> = state
        .tensors
        .iter()
        .map(|(n, t)| (strip_module(n), t.size()))
        .collect();
    let prefix = if shapes.keys().any(|n| n.starts_with("pretrained.")) {
        "pretrained."
    } else if shapes.keys().any(|n| is_torchvision(n)) {
        ""
    } else {
        bail!(
            "no ResNet tensors: neither `pretrained.conv1.weight` (DANet) nor `conv1.weight` (torchvision) nor any `layerK.*`; the file's tensors look like `{}`",
            shapes.keys().next().copied().unwrap_or("(none)")
        );
    };
    let t = Tensors { shapes, prefix };
    let (deep_stem, stem_width, stem_out) = t.stem()?;
    let layers = t.stage_depths()?;
    let block = t.block_kind(&layers)?;
    let width = t.width(deep_stem, stem_width, stem_out)?;
    let classes = match t.shapes.get("head.conv8.1.bias") {
        Some(s) if s.len() == 1 => Some(s[0] as usize),
        Some(s) => bail!("`head.conv8.1.bias` has shape {s:?}: not a classifier bias"),
        None => None,
    };
    Ok(InferredArchitecture {
        block,
        layers,
        width,
        deep_stem,
        classes,
        prefix,
    })
}

/// The state dict's tensor shapes, read under the ResNet's prefix (`pretrained.` for
/// DANet, none for torchvision); errors name the full tensor name.
struct Tensors<'a> {
    shapes: BTreeMap<&'a str, Vec<i64>>,
    prefix: &'static str,
}

impl Tensors<'_> {
    fn get(&self, name: &str) -> Option<&Vec<i64>> {
        self.shapes.get(format!("{}{name}", self.prefix).as_str())
    }

    fn full(&self, name: &str) -> String {
        format!("`{}{name}`", self.prefix)
    }

    fn expect(&self, name: &str, want: &[i64]) -> Result<()> {
        match self.get(name) {
            Some(s) if s == want => Ok(()),
            Some(s) => bail!("{} has shape {s:?}, expected {want:?}", self.full(name)),
            None => bail!("the file has no {}", self.full(name)),
        }
    }

    /// A conv weight's (output, input) channels.
    fn conv_out(&self, name: &str) -> Result<(i64, i64)> {
        match self.get(name) {
            Some(s) if s.len() == 4 => Ok((s[0], s[1])),
            Some(s) => bail!("{} has shape {s:?}: not a conv weight", self.full(name)),
            None => bail!("the file has no {}", self.full(name)),
        }
    }

    /// The stem: (deep stem, its first conv's width, its output channels).
    fn stem(&self) -> Result<(bool, i64, i64)> {
        let (deep_stem, stem_width, stem_out) = if self.get("conv1.0.weight").is_some() {
            let (w, _) = self.conv_out("conv1.0.weight")?;
            self.expect("conv1.0.weight", &[w, 3, 3, 3])?;
            self.expect("conv1.3.weight", &[w, w, 3, 3])?;
            self.expect("conv1.6.weight", &[2 * w, w, 3, 3])?;
            (true, w, 2 * w)
        } else if self.get("conv1.weight").is_some() {
            let (w, _) = self.conv_out("conv1.weight")?;
            self.expect("conv1.weight", &[w, 3, 7, 7])?;
            (false, w, w)
        } else {
            bail!(
                "the file has neither {} (7x7 stem) nor {} (deep stem): not a ResNet/DANet state dict",
                self.full("conv1.weight"),
                self.full("conv1.0.weight")
            );
        };
        if self.get("bn1.weight").is_some() {
            self.expect("bn1.weight", &[stem_out])?;
        }
        Ok((deep_stem, stem_width, stem_out))
    }

    /// Blocks per stage: the `layerK.I` indices, which must run 0..n.
    fn stage_depths(&self) -> Result<[usize; 4]> {
        let mut layers = [0usize; 4];
        for (k, count) in layers.iter_mut().enumerate() {
            let stage = format!("{}layer{}.", self.prefix, k + 1);
            let indices: Vec<usize> = self
                .shapes
                .keys()
                .filter_map(|n| n.strip_prefix(stage.as_str()))
                .filter_map(|rest| rest.split('.').next()?.parse().ok())
                .collect();
            let n = (0..)
                .take_while(|i| {
                    self.get(&format!("layer{}.{i}.conv1.weight", k + 1))
                        .is_some()
                })
                .count();
            if let Some(&beyond) = indices.iter().filter(|&&i| i >= n).max() {
                bail!(
                    "the file has {}* tensors but no {}: its blocks are not numbered 0..",
                    self.full(&format!("layer{}.{beyond}.", k + 1)),
                    self.full(&format!("layer{}.{n}.conv1.weight", k + 1))
                );
            }
            if n == 0 {
                bail!(
                    "the file has no {}: not a ResNet/DANet state dict",
                    self.full(&format!("layer{}.0.conv1.weight", k + 1))
                );
            }
            *count = n;
        }
        Ok(layers)
    }

    /// Block type: a bottleneck has conv3, a basic block does not; every block agrees.
    fn block_kind(&self, layers: &[usize; 4]) -> Result<BlockKind> {
        let block = if self.get("layer1.0.conv3.weight").is_some() {
            BlockKind::Bottleneck
        } else {
            BlockKind::Basic
        };
        for (k, &n) in layers.iter().enumerate() {
            for i in 0..n {
                let conv3 = format!("layer{}.{i}.conv3.weight", k + 1);
                match (block, self.get(&conv3).is_some()) {
                    (BlockKind::Basic, true) => bail!(
                        "the file has {} but no {}: basic and bottleneck blocks mixed",
                        self.full(&conv3),
                        self.full("layer1.0.conv3.weight")
                    ),
                    (BlockKind::Bottleneck, false) => bail!(
                        "the file has no {} but has {}: basic and bottleneck blocks mixed",
                        self.full(&conv3),
                        self.full("layer1.0.conv3.weight")
                    ),
                    _ => {}
                }
            }
        }
        Ok(block)
    }

    /// Width: layer1's planes; each stage doubles them, and the stem is as wide as
    /// layer1.
    fn width(&self, deep_stem: bool, stem_width: i64, stem_out: i64) -> Result<i64> {
        let (width, layer1_in) = self.conv_out("layer1.0.conv1.weight")?;
        if layer1_in != stem_out {
            bail!(
                "{} takes {layer1_in} channels but the stem gives {stem_out} (`{}bn1`)",
                self.full("layer1.0.conv1.weight"),
                self.prefix
            );
        }
        if stem_width != width {
            bail!(
                "the stem is {stem_width} channels wide ({}) but layer1 {width} ({}): segtool's ResNet ties the two",
                self.full(if deep_stem { "conv1.0.weight" } else { "conv1.weight" }),
                self.full("layer1.0.conv1.weight")
            );
        }
        for k in 2..=4 {
            let name = format!("layer{k}.0.conv1.weight");
            let (planes, _) = self.conv_out(&name)?;
            let want = width << (k - 1);
            if planes != want {
                bail!(
                    "{} has {planes} output channels; a ResNet of width {width} (from {}) has {want} there",
                    self.full(&name),
                    self.full("layer1.0.conv1.weight")
                );
            }
        }
        Ok(width)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DaNet;
    use segtool_model_spec::ModelSpec;
    use tch::{nn, Tensor};

    /// The state dict of a DaNet built for `backbone` (segtool's names are DANet's).
    fn state_of(backbone: BackboneSpec, classes: usize, module: bool) -> StateDict {
        let spec = ModelSpec::new(
            "x",
            backbone,
            (0..classes).map(|c| format!("c{c}")).collect(),
        );
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let _model = DaNet::new(&vs.root(), &spec);
        let prefix = if module { "module." } else { "" };
        StateDict {
            tensors: vs
                .variables()
                .into_iter()
                .map(|(n, t)| (format!("{prefix}{n}"), t))
                .collect(),
            skipped: 0,
            root: None,
            values: Vec::new(),
        }
    }

    fn without(mut state: StateDict, pred: impl Fn(&str) -> bool) -> StateDict {
        state.tensors.retain(|(n, _)| !pred(n));
        state
    }

    fn err(state: &StateDict) -> String {
        format!("{:#}", infer_architecture(state).unwrap_err())
    }

    #[test]
    fn every_preset_and_stem_is_recognised() {
        for depth in [18, 34, 50, 101, 152] {
            for deep_stem in [false, true] {
                let mut b = BackboneSpec::resnet(depth, 16).unwrap();
                b.width = 8;
                b.deep_stem = deep_stem;
                let arch = infer_architecture(&state_of(b.clone(), 3, depth == 50)).unwrap();
                assert_eq!(arch.backbone(16, None), b, "resnet{depth}");
                assert_eq!(arch.classes, Some(3));
                assert_eq!(arch.prefix, "pretrained.");
                assert_eq!(arch.name(), format!("resnet{depth}"));
                arch.check_preset(&arch.name(), &BackboneSpec::resnet(depth, 8).unwrap())
                    .unwrap();
            }
        }
        let arch = infer_architecture(&state_of(BackboneSpec::tiny(), 2, false)).unwrap();
        assert_eq!(arch.name(), "tiny");
    }

    #[test]
    fn other_block_counts_build_their_own_backbone() {
        let b = BackboneSpec {
            layers: [2, 1, 5, 2],
            ..BackboneSpec::resnet(50, 8).unwrap()
        };
        let arch = infer_architecture(&state_of(b.clone(), 4, false)).unwrap();
        assert_eq!(arch.name(), "resnet-bottleneck-2-1-5-2");
        assert_eq!(arch.backbone(8, None), b);
        let e = arch
            .check_preset("resnet50", &BackboneSpec::resnet(50, 8).unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("resnet50 has bottleneck blocks [3, 4, 6, 3]"),
            "{e}"
        );
        assert!(e.contains("[2, 1, 5, 2]"), "{e}");
    }

    #[test]
    fn torchvision_resnet_without_head() {
        let mut b = BackboneSpec::resnet(34, 8).unwrap();
        b.width = 8;
        let state = state_of(b.clone(), 3, false);
        let state = StateDict {
            tensors: state
                .tensors
                .into_iter()
                .filter_map(|(n, t)| Some((n.strip_prefix("pretrained.")?.to_string(), t)))
                .chain([(
                    "fc.weight".to_string(),
                    Tensor::zeros([10i64, 64], tch::kind::FLOAT_CPU),
                )])
                .collect(),
            ..state
        };
        let arch = infer_architecture(&state).unwrap();
        assert_eq!((arch.prefix, arch.classes), ("", None));
        assert_eq!(arch.backbone(8, None), b);
    }

    #[test]
    fn unrecognisable_files_name_the_tensor() {
        let b = || BackboneSpec::resnet(18, 8).unwrap();
        let e = err(&without(state_of(b(), 3, false), |n| {
            n == "pretrained.conv1.weight"
        }));
        assert!(e.contains("`pretrained.conv1.weight`"), "{e}");
        let e = err(&without(state_of(b(), 3, false), |n| {
            n.starts_with("pretrained.layer3.")
        }));
        assert!(e.contains("`pretrained.layer3.0.conv1.weight`"), "{e}");
        let e = err(&without(state_of(b(), 3, true), |n| {
            n.starts_with("module.pretrained.layer2.0.")
        }));
        assert!(e.contains("`pretrained.layer2.1.`"), "{e}");
        let e = err(&without(state_of(b(), 3, false), |n| {
            n.starts_with("pretrained.")
        }));
        assert!(e.contains("no ResNet tensors"), "{e}");
        // A bottleneck stage missing one conv3.
        let mut r50 = BackboneSpec::resnet(50, 8).unwrap();
        r50.width = 8;
        let e = err(&without(state_of(r50, 3, false), |n| {
            n == "pretrained.layer3.2.conv3.weight"
        }));
        assert!(e.contains("`pretrained.layer3.2.conv3.weight`"), "{e}");
    }
}
