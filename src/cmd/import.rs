//! `segtool import`: PyTorch weights -> a segtool checkpoint. Takes official DANet
//! checkpoints (`.pth`, `.pth.tar` training checkpoints, `.safetensors`) whole, or an
//! ImageNet ResNet in torchvision naming as the backbone of a fresh model. Depth, block
//! type, width, stem and classes come from the file; output stride and multi-grid, which
//! weights do not record, from the flags.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use segtool_model_spec::ModelSpec;
use segtool_train::checkpoint::{self, CheckpointInfo};
use segtool_train::import::{
    from_mmseg, import_from, infer_architecture, is_mmseg, read_state_dict, ImportMode,
    InferredArchitecture, MmsegOverrides, StateDict,
};
use segtool_train::DaNet;

#[derive(clap::Args)]
pub struct Args {
    /// PyTorch file: .pth / .pth.tar (torch.save, zip or pre-1.6 format) or .safetensors.
    #[arg(long = "from", value_name = "FILE")]
    pub from: PathBuf,
    /// Check that the file is this backbone (tiny, resnet18, resnet34, resnet50,
    /// resnet101, resnet152): an error naming both when its blocks differ. Depth, block
    /// type, width and stem are always read from the file.
    #[arg(long)]
    pub backbone: Option<String>,
    /// Output stride, 8 or 16: set by dilations, which the weights do not record.
    /// [default: 8]
    #[arg(long)]
    pub output_stride: Option<i64>,
    /// Check that the file's stem is PyTorch-Encoding's deep_base (three 3x3 convs,
    /// `pretrained.conv1.0.weight`): an error when it is the 7x7 conv. The stem is always
    /// read from the file.
    #[arg(long)]
    pub deep_stem: bool,
    /// Dilations of layer4's blocks, e.g. 4,8,16 (DANet's multi-grid models), one per
    /// block; not recorded in the weights. [default: none]
    #[arg(long, value_delimiter = ',')]
    pub multi_grid: Option<Vec<i64>>,
    /// Number of classes, named class0, class1, ... [full mode default: the file's
    /// classifier size]
    #[arg(long, conflicts_with = "classes_file")]
    pub classes: Option<usize>,
    /// Class names: a classes.json ({"classes": [...], "palette": [...]}) or a text file
    /// with one name per line.
    #[arg(long, value_name = "FILE")]
    pub classes_file: Option<PathBuf>,
    /// full: the whole DANet; backbone: only the ResNet (`pretrained.*`), the head keeps
    /// its fresh init. [default: backbone for torchvision key names, else full]
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Accept a file that does not fit the model exactly: tensors the mode should set left
    /// at their init, or file tensors inside the model's modules ignored.
    #[arg(long)]
    pub allow_missing: bool,
    /// mmsegmentation files: `align_corners` of the model's resizes when the file's meta
    /// has no config (the zoo's: false, true for the 769x769 Cityscapes models).
    #[arg(long, value_name = "true|false")]
    pub align_corners: Option<bool>,
    /// Output checkpoint (.safetensors).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Mode {
    Full,
    Backbone,
}

impl From<Mode> for ImportMode {
    fn from(m: Mode) -> Self {
        match m {
            Mode::Full => ImportMode::Full,
            Mode::Backbone => ImportMode::Backbone,
        }
    }
}

pub fn run(args: Args) -> Result<()> {
    let state = read_state_dict(&args.from)?;
    println!("{}", state.describe(&args.from));
    if is_mmseg(&state) {
        return run_mmseg(&args, state);
    }
    if args.align_corners.is_some() {
        bail!(
            "--align-corners is for mmsegmentation files; {} is not one",
            args.from.display()
        );
    }
    let mode = args
        .mode
        .map_or_else(|| ImportMode::detect(&state), ImportMode::from);
    let arch = infer_architecture(&state).with_context(|| {
        format!(
            "{}: cannot tell the architecture from the weights",
            args.from.display()
        )
    })?;
    check_flags(&args, &arch)?;
    let (classes, palette) = classes(&args, &arch, mode)?;
    let output_stride = args.output_stride.unwrap_or(8);
    let backbone = arch.backbone(output_stride, args.multi_grid.clone());
    let mut spec = ModelSpec::new(&arch.name(), backbone, classes);
    if let Some(p) = palette {
        spec.palette = p;
    }
    println!("architecture from the weights: {}", arch.describe());
    let given = |yes: bool| if yes { "given" } else { "default" };
    let grid = match &args.multi_grid {
        Some(g) => g.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
        None => "none".into(),
    };
    println!(
        "output stride {output_stride} ({}), multi-grid {grid} ({}): not stored in weights, \
         set with --output-stride 8|16 and --multi-grid D1,D2,.. (one per layer4 block; \
         the released DANet101: --output-stride 8 --multi-grid 4,8,16)",
        given(args.output_stride.is_some()),
        given(args.multi_grid.is_some()),
    );
    spec.validate()?;
    let mut vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &spec);
    let report = import_from(&mut vs, state, &args.from, mode)?;
    report.describe(mode).iter().for_each(|l| println!("{l}"));
    report.check(mode, args.allow_missing)?;
    let info = CheckpointInfo::from([
        ("imported_from".to_string(), args.from.display().to_string()),
        (
            "import_mode".to_string(),
            format!("{mode:?}").to_lowercase(),
        ),
    ]);
    checkpoint::save(&args.out, &vs, &spec, &info)?;
    println!(
        "wrote {} ({}, output stride {}, {} classes)",
        args.out.display(),
        spec.backbone_name,
        spec.backbone.output_stride,
        spec.num_classes()
    );
    Ok(())
}

/// An mmsegmentation DANet: architecture, classes and test pipeline from the file.
fn run_mmseg(args: &Args, state: StateDict) -> Result<()> {
    let file = args.from.display();
    if args.backbone.is_some() || args.deep_stem || args.multi_grid.is_some() {
        bail!("{file} is an mmsegmentation checkpoint: its architecture is read from it (drop --backbone/--deep-stem/--multi-grid)");
    }
    if args.mode.is_some_and(|m| matches!(m, Mode::Backbone)) {
        bail!("{file}: --mode backbone is for ImageNet ResNets; an mmseg file imports whole");
    }
    let name = args
        .from
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let overrides = MmsegOverrides {
        align_corners: args.align_corners,
        output_stride: args.output_stride,
    };
    let imported = from_mmseg(state, &name, &overrides)
        .with_context(|| format!("{file}: not an mmsegmentation DANet segtool can import"))?;
    let mut spec = imported.spec;
    if args.classes.is_some() || args.classes_file.is_some() {
        let arch_classes = spec.num_classes();
        let dummy = InferredArchitecture {
            block: spec.backbone.block,
            layers: spec.backbone.layers,
            width: spec.backbone.width,
            deep_stem: spec.backbone.deep_stem,
            classes: Some(arch_classes),
            prefix: "",
        };
        let (names, palette) = classes(args, &dummy, ImportMode::Full)?;
        if names.len() != arch_classes {
            bail!(
                "{} class names given, but {file}'s classifier has {arch_classes}",
                names.len()
            );
        }
        spec.palette = palette.unwrap_or_else(|| spec.palette.clone());
        spec.classes = names;
    }
    println!(
        "mmsegmentation DANet: {} ({:?} blocks {:?}, stem {:?}), head {}/{} channels, aux head {}, {} classes",
        spec.backbone_name,
        spec.backbone.block,
        spec.backbone.layers,
        spec.backbone.stem_conv_widths(),
        spec.inter_channels(),
        spec.qk_channels(),
        match &spec.aux_head {
            Some(a) => format!("on layer{} ({} channels, loss weight {})", a.in_layer, a.channels, a.loss_weight),
            None => "none".into(),
        },
        spec.num_classes()
    );
    for note in &imported.notes {
        println!("  {note}");
    }
    spec.validate()?;
    let mut vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &spec);
    let report = import_from(&mut vs, imported.state, &args.from, ImportMode::Full)?;
    report
        .describe(ImportMode::Full)
        .iter()
        .for_each(|l| println!("{l}"));
    report.check(ImportMode::Full, args.allow_missing)?;
    let info = CheckpointInfo::from([
        ("imported_from".to_string(), args.from.display().to_string()),
        ("import_mode".to_string(), "mmseg".to_string()),
    ]);
    checkpoint::save(&args.out, &vs, &spec, &info)?;
    println!(
        "wrote {} ({}, output stride {}, {} classes, align_corners {})",
        args.out.display(),
        spec.backbone_name,
        spec.backbone.output_stride,
        spec.num_classes(),
        spec.align_corners
    );
    Ok(())
}

/// `--backbone` and `--deep-stem` only check what the file says.
fn check_flags(args: &Args, arch: &InferredArchitecture) -> Result<()> {
    let file = args.from.display();
    if let Some(name) = &args.backbone {
        let preset = segtool_train::presets::backbone_spec(name, 8)?;
        arch.check_preset(name, &preset)
            .with_context(|| format!("--backbone {name} disagrees with {file}"))?;
    }
    if args.deep_stem && !arch.deep_stem {
        let p = arch.prefix;
        bail!(
            "--deep-stem given, but {file} has the 7x7 stem (`{p}conv1.weight`, \
             no `{p}conv1.0.weight`); the stem is read from the file: drop --deep-stem"
        );
    }
    Ok(())
}

type Classes = (Vec<String>, Option<Vec<[u8; 3]>>);

fn classes(args: &Args, arch: &InferredArchitecture, mode: ImportMode) -> Result<Classes> {
    if let Some(path) = &args.classes_file {
        if path.extension().is_some_and(|e| e == "json") {
            let file = segtool_core::dataset::ClassesFile::read(path)?;
            return Ok((file.classes, file.palette));
        }
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let names: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect();
        if names.is_empty() {
            bail!("{}: no class names", path.display());
        }
        return Ok((names, None));
    }
    let count = match (args.classes, mode) {
        (Some(n), _) => n,
        (None, ImportMode::Full) => arch
            .classes
            .context("the file has no `head.conv8.1.bias`: give --classes or --classes-file")?,
        (None, ImportMode::Backbone) => {
            bail!("backbone import: give --classes or --classes-file for the new head")
        }
    };
    Ok(((0..count).map(|c| format!("class{c}")).collect(), None))
}
