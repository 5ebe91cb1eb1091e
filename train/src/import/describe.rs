//! What an import says: the lines `segtool import` (and `segtool train` with
//! `model.init`) prints after reading a file and after importing it, as values.

use std::path::Path;

use anyhow::{Context, Result};
use tch::nn;

use super::{import_into, read_state_dict, ImportMode, ImportReport, StateDict};

impl StateDict {
    /// `read PATH: N tensors [under `ROOT`], M other values skipped`.
    pub fn describe(&self, path: &Path) -> String {
        let root = self
            .root
            .as_ref()
            .map(|r| format!(" under `{r}`"))
            .unwrap_or_default();
        format!(
            "read {}: {} tensors{root}, {} other values skipped",
            path.display(),
            self.tensors.len(),
            self.skipped
        )
    }
}

impl ImportReport {
    /// The report in `mode`'s terms: counts, then the unexpected and missing names (the
    /// first 12 of each), one line per entry.
    pub fn describe(&self, mode: ImportMode) -> Vec<String> {
        let mut lines = vec![format!(
            "{mode:?} import: {} loaded, {} missing, {} unexpected (ignored)",
            self.loaded.len(),
            self.missing.len(),
            self.unexpected.len()
        )];
        names(&mut lines, "unexpected", &self.unexpected);
        if self
            .unexpected
            .iter()
            .any(|n| n.starts_with("pretrained.conv1.0."))
        {
            lines.push(
                "  (the file's stem is PyTorch-Encoding's deep_base: three 3x3 convs, not a 7x7 conv)"
                    .into(),
            );
        }
        match mode {
            ImportMode::Full => names(&mut lines, "missing", &self.missing),
            ImportMode::Backbone => {
                let backbone: Vec<String> = self
                    .missing
                    .iter()
                    .filter(|n| n.starts_with("pretrained."))
                    .cloned()
                    .collect();
                names(&mut lines, "missing from the backbone", &backbone);
                lines.push(format!(
                    "  the head ({} tensors) keeps its fresh initialisation",
                    self.missing.len() - backbone.len()
                ));
            }
        }
        lines
    }

    /// [`ImportReport::ensure_complete`], unless `allow_missing`; the error names the flag
    /// that accepts an incomplete import.
    pub fn check(&self, mode: ImportMode, allow_missing: bool) -> Result<()> {
        if allow_missing {
            return Ok(());
        }
        self.ensure_complete(mode)
            .map_err(|e| anyhow::anyhow!("{e} (--allow-missing accepts this)"))
    }
}

fn names(lines: &mut Vec<String>, what: &str, names: &[String]) {
    const SHOWN: usize = 12;
    if names.is_empty() {
        return;
    }
    lines.push(format!("  {what}:"));
    lines.extend(names.iter().take(SHOWN).map(|n| format!("    {n}")));
    if names.len() > SHOWN {
        lines.push(format!("    ... and {} more", names.len() - SHOWN));
    }
}

/// [`import_into`] with the file named in its errors.
pub fn import_from(
    vs: &mut nn::VarStore,
    state: StateDict,
    path: &Path,
    mode: ImportMode,
) -> Result<ImportReport> {
    import_into(vs, state, mode).with_context(|| format!("importing {}", path.display()))
}

/// Pretrained weights into a fresh model (a run's `model.init`): torchvision ResNet names
/// set the backbone only, DANet names the whole model. `say` receives each line as
/// `segtool import` prints it, when it happens (the read, then the report); an incomplete
/// import is an error.
pub fn init_from_file(
    vs: &mut nn::VarStore,
    path: &Path,
    say: &mut dyn FnMut(String),
) -> Result<ImportReport> {
    let (report, mode) = load_init(vs, path, say)?;
    report.check(mode, false)?;
    Ok(report)
}

/// [`init_from_file`] without its completeness check: the report and the mode the file
/// was read in, for a caller with checks of its own to make first (QAT's BatchNorm
/// statistics) before [`ImportReport::check`].
pub fn load_init(
    vs: &mut nn::VarStore,
    path: &Path,
    say: &mut dyn FnMut(String),
) -> Result<(ImportReport, ImportMode)> {
    let mut state = read_state_dict(path)?;
    say(state.describe(path));
    if super::is_mmseg(&state) {
        // An mmsegmentation DANet: its tensors under segtool's names (the run's model
        // spec, e.g. an mmseg preset's, must be the file's architecture: shapes are checked).
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let overrides = super::MmsegOverrides::default();
        state = super::from_mmseg(state, &name.unwrap_or_default(), &overrides)
            .with_context(|| format!("{}", path.display()))?
            .state;
        say("mmsegmentation checkpoint: tensors renamed to segtool's".into());
    }
    let mode = ImportMode::detect(&state);
    let report = import_from(vs, state, path, mode)?;
    for line in report.describe(mode) {
        say(line);
    }
    Ok((report, mode))
}
