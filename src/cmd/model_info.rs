//! `segtool model info`: what a DANet configuration costs before anything is trained —
//! parameters, MACs and training-activation memory per top-level module (state-dict
//! names), and the bytes PAM's attention holds with each implementation. Computed from
//! the spec alone (`segtool_train::model::module_costs`), so it answers instantly for any
//! input size, including ones that would not fit in memory.

use anyhow::{bail, Result};
use segtool_model_spec::ModelSpec;
use segtool_train::model::{feature_size, module_costs, pam_cam_attention_bytes, AttentionImpl};

use segtool_train::presets::backbone_spec;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(clap::Subcommand)]
pub enum ModelCommand {
    /// Parameters, MACs and memory per module for a backbone, class count and input size.
    Info(InfoArgs),
}

#[derive(clap::Args)]
pub struct InfoArgs {
    /// tiny, resnet18, resnet34, resnet50, resnet101, resnet152.
    #[arg(long, default_value = "resnet101")]
    pub backbone: String,
    #[arg(long, default_value_t = 8)]
    pub output_stride: i64,
    #[arg(long, default_value_t = 19)]
    pub classes: usize,
    /// Input size HxW (e.g. 768x768, 1024x2048).
    #[arg(long, default_value = "768x768")]
    pub size: String,
    /// Images per batch (scales activation and attention memory).
    #[arg(long, default_value_t = 1)]
    pub batch: u64,
    /// PyTorch-Encoding's deep_base stem (three 3x3 convs, 2x width into layer1).
    #[arg(long)]
    pub deep_stem: bool,
    /// Dilations of layer4's blocks, e.g. 4,8,16.
    #[arg(long, value_delimiter = ',')]
    pub multi_grid: Option<Vec<i64>>,
    /// Attention the MAC and activation columns assume: explicit or sdpa.
    #[arg(long, default_value = "explicit")]
    pub attention: AttentionImpl,
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        ModelCommand::Info(a) => info(a),
    }
}

/// "HxW" -> (h, w), through the one size parser ([`crate::args::size::hxw`]).
fn parse_size(s: &str) -> Result<(i64, i64)> {
    let size = crate::args::size::hxw(s).map_err(|e| anyhow::anyhow!("--size {e}"))?;
    Ok((i64::from(size.height), i64::from(size.width)))
}

fn mib(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.2} GiB", bytes / (1024.0 * 1024.0 * 1024.0))
    } else {
        format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
    }
}

/// 23508032 -> "23,508,032".
fn grouped(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn info(a: InfoArgs) -> Result<()> {
    let (h, w) = parse_size(&a.size)?;
    let mut backbone = backbone_spec(&a.backbone, a.output_stride)?;
    backbone.deep_stem = a.deep_stem;
    backbone.multi_grid = a.multi_grid.clone();
    if a.classes == 0 {
        bail!("--classes must be at least 1");
    }
    let spec = ModelSpec::new(
        &a.backbone,
        backbone,
        (0..a.classes).map(|c| format!("class{c}")).collect(),
    );
    spec.validate()?;
    let (fh, fw) = feature_size(&spec.backbone, h, w);
    let costs = module_costs(&spec, h, w, a.attention);
    let b = a.batch;

    println!(
        "DANet-{}{}{}, output stride {}, {} classes; input {b}x3x{h}x{w} -> head features {fh}x{fw} (N = {})",
        a.backbone,
        if a.deep_stem { " (deep stem)" } else { "" },
        a.multi_grid.as_ref().map_or(String::new(), |g| format!(", multi-grid {g:?}")),
        spec.backbone.output_stride,
        a.classes,
        fh * fw,
    );
    println!(
        "MACs and activations assume {:?} attention; activations are fp32, training, batch {b}\n",
        a.attention
    );
    println!(
        "{:<18} {:>12} {:>10} {:>11} {:>14}",
        "module", "params", "buffers", "GMACs", "activations"
    );
    for c in &costs {
        println!(
            "{:<18} {:>12} {:>10} {:>11.3} {:>14}",
            c.name,
            grouped(c.params),
            grouped(c.buffers),
            (c.macs * b) as f64 / 1e9,
            mib((c.activations * b * 4) as f64),
        );
    }
    let (params, buffers) = (
        costs.iter().map(|c| c.params).sum::<u64>(),
        costs.iter().map(|c| c.buffers).sum::<u64>(),
    );
    let (macs, act) = (
        costs.iter().map(|c| c.macs).sum::<u64>(),
        costs.iter().map(|c| c.activations).sum::<u64>(),
    );
    println!(
        "{:<18} {:>12} {:>10} {:>11.3} {:>14}",
        "total",
        grouped(params),
        grouped(buffers),
        (macs * b) as f64 / 1e9,
        mib((act * b * 4) as f64)
    );
    let inference = costs
        .iter()
        .filter(|c| c.name != "head.conv6" && c.name != "head.conv7")
        .map(|c| c.macs)
        .sum::<u64>();
    println!(
        "inference (conv8 only): {:.3} GMACs",
        (inference * b) as f64 / 1e9
    );
    println!(
        "training memory ~ {} activations + {} weights, {} gradients, {} SGD momentum",
        mib((act * b * 4) as f64),
        mib((params * 4) as f64),
        mib((params * 4) as f64),
        mib((params * 4) as f64),
    );

    println!("\nattention bytes (fp32, batch {b}):");
    for imp in [AttentionImpl::Explicit, AttentionImpl::Sdpa] {
        let bytes = pam_cam_attention_bytes(&spec, h, w, imp);
        let note = match imp {
            AttentionImpl::Explicit => "N x N and C x C matrices".to_string(),
            AttentionImpl::Sdpa => format!(
                "CPU flash kernel tiles for {} threads + logsumexp; no N x N",
                tch::get_num_threads()
            ),
        };
        println!(
            "  {:<9} PAM {:>12}  CAM {:>12}  ({note})",
            format!("{imp:?}").to_lowercase(),
            mib((bytes.pam * b) as f64),
            mib((bytes.cam * b) as f64),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_grouping() {
        assert_eq!(parse_size("768x1024").unwrap(), (768, 1024));
        assert!(parse_size("768").is_err() && parse_size("0x5").is_err());
        assert_eq!(grouped(23_508_032), "23,508,032");
        assert_eq!(grouped(999), "999");
    }
}
