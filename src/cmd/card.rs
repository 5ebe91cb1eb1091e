//! `segtool card`: the model card of an ONNX file — what the runtime will feed it and how
//! it reads its output — with the source of every field (`--show`), or written into a
//! copy of the file's metadata so that the copy describes itself (`--out`).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use segtool_runtime::card::{self, ResolvedCard, CARD_METADATA_KEY};

use crate::args::card::CardArgs;

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
    #[command(flatten)]
    pub card: CardArgs,
}

pub fn run(args: Args) -> Result<()> {
    if !args.show && args.out.is_none() {
        bail!("say what to do: --show (print the card) or --out FILE (write it into a copy)");
    }
    let resolved = card::resolve(&args.model, &args.card.request())?;
    if args.show {
        print!("{}", describe(&args.model, &resolved));
    }
    if let Some(out) = &args.out {
        if resolved.segtool_export {
            bail!(
                "{} is a segtool export: its spec already describes it (no card needed)",
                args.model.display()
            );
        }
        if out == &args.model {
            bail!(
                "--out {} is the model itself: write the copy elsewhere",
                out.display()
            );
        }
        card::write_card(&args.model, out, &resolved.card)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "wrote {} (card in metadata key {CARD_METADATA_KEY})",
            out.display()
        );
    }
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
