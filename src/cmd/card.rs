//! `segtool card`: the model card of an ONNX file — what the runtime will feed it and how
//! it reads its output — with the source of every field (`--show`), or written into a
//! copy of the file's metadata so that the copy describes itself (`--out`), or as a Triton
//! model repository whose model carries its card (`--triton DIR`): Triton runs the graph,
//! and a client reads the card from the served file's metadata to prepare and decode.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use segtool_runtime::card::{self, ResolvedCard, CARD_METADATA_KEY};

use crate::args::card::CardArgs;
use crate::args::triton::TritonArgs;

#[derive(clap::Args)]
pub struct Args {
    /// The ONNX model.
    pub model: PathBuf,
    /// Print the card and where each field came from.
    #[arg(long)]
    pub show: bool,
    /// Write a copy of the model with the card in its metadata (`segtool.card`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// `--triton DIR`: the model, with its card in its metadata, as a Triton repository.
    #[command(flatten)]
    pub triton: TritonArgs,
    #[command(flatten)]
    pub card: CardArgs,
}

pub fn run(args: Args) -> Result<()> {
    if !args.show && args.out.is_none() && args.triton.triton.is_none() {
        bail!(
            "say what to do: --show (print the card), --out FILE (write it into a copy) or \
             --triton DIR (a Triton repository of the described model)"
        );
    }
    let resolved = card::resolve(&args.model, &args.card.request())?;
    let model = card::model_file(&args.model)?;
    if args.show {
        print!("{}", describe(&args.model, &resolved));
    }
    if (args.out.is_some() || args.triton.triton.is_some()) && resolved.segtool_export {
        bail!(
            "{} is a segtool export: its spec already describes it (no card needed; \
             `segtool export --triton` writes its repository)",
            args.model.display()
        );
    }
    if let Some(out) = &args.out {
        if out == &model {
            bail!(
                "--out {} is the model itself: write the copy elsewhere",
                out.display()
            );
        }
        card::write_card(&model, out, &resolved.card)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "wrote {} (card in metadata key {CARD_METADATA_KEY})",
            out.display()
        );
    }
    if let Some(dir) = &args.triton.triton {
        write_triton(&args, &model, dir, &resolved)?;
    }
    Ok(())
}

/// `--triton DIR`: the described copy, staged beside the repository, as a repository
/// named after the model (a folder's name for an SDK or Hugging Face folder).
fn write_triton(
    args: &Args,
    model: &std::path::Path,
    dir: &std::path::Path,
    resolved: &ResolvedCard,
) -> Result<()> {
    let stem = args
        .model
        .file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let described = dir.join(format!(".{stem}.described.onnx"));
    card::write_card(model, &described, &resolved.card)?;
    let written = args.triton.write(&described, Some(stem));
    let _ = std::fs::remove_file(&described);
    written?;
    eprintln!("the repository's model carries its card (metadata key {CARD_METADATA_KEY})");
    Ok(())
}

/// One line per field: name, value, source.
fn describe(model: &std::path::Path, resolved: &ResolvedCard) -> String {
    let c = &resolved.card;
    let value = |field: &str| -> String {
        let json = |v: serde_json::Value| match v {
            serde_json::Value::String(s) => s,
            serde_json::Value::Null => "-".into(),
            other => other.to_string(),
        };
        let v = serde_json::to_value(c).expect("a card serialises");
        let (head, tail) = field.split_once('.').unwrap_or((field, ""));
        let v = if tail.is_empty() {
            v[head].clone()
        } else {
            v[head][tail].clone()
        };
        let text = json(v);
        match field {
            "classes" | "palette" if text.chars().count() > 60 => {
                let n = if field == "classes" {
                    c.classes.len()
                } else {
                    c.palette.len()
                };
                format!(
                    "{}... ({n} entries)",
                    text.chars().take(48).collect::<String>()
                )
            }
            _ => text,
        }
    };
    let mut out = format!("model card of {}\n", model.display());
    for (field, source) in &resolved.sources {
        out.push_str(&format!("  {field:<22} {:<34} {source}\n", value(field)));
    }
    out
}
