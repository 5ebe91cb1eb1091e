//! The search over mixes (module docs of [`super`], step 3): all candidates float, then
//! bisection over how many of the worst stay float, then a refinement that returns each
//! chosen layer to INT8 when the target still holds without it.

use crate::CalibrationError;

/// One evaluated mix.
pub(super) struct Measured {
    pub(super) float: Vec<String>,
    pub(super) agreement: f64,
    pub(super) agreement_bound: f64,
    pub(super) miou: Option<f64>,
    pub(super) ok: bool,
    pub(super) bytes: Vec<u8>,
}

/// What the search measured: the chosen mix first when one meets the target, then the
/// other mixes of the bisection and the refinement that met it, in order.
pub(super) struct Search {
    pub(super) measured: Vec<Measured>,
    /// Some mix (all candidates float) meets the target.
    pub(super) reachable: bool,
}

/// The most evaluations the search makes over `candidates` layers (beyond the all-INT8
/// one): all candidates float, the bisection's `ceil(log2(candidates))`, and at most one
/// refinement trial per chosen layer but the last.
pub fn search_bound(candidates: usize) -> usize {
    if candidates == 0 {
        return 0;
    }
    let bisection = (usize::BITS - (candidates - 1).leading_zeros()) as usize;
    1 + bisection + candidates.saturating_sub(1)
}

/// Searches `names` (worst SNR first, at least one); `measure` evaluates a set of float
/// layers, described for the log.
pub(super) fn search(
    names: &[String],
    measure: &mut dyn FnMut(&[String], String) -> Result<Measured, CalibrationError>,
) -> Result<Search, CalibrationError> {
    let n = names.len();
    let all = measure(names, format!("{n} float"))?;
    let reachable = all.ok;
    let mut measured = vec![all];
    if !reachable {
        return Ok(Search {
            measured,
            reachable,
        });
    }
    // Bisection over k, the number of worst-SNR candidates left float: the metric grows
    // (nearly) monotonically with k, so the smallest k that meets the target takes
    // log2(candidates) evaluations instead of a greedy search's quadratic count.
    let (mut lo, mut hi) = (0usize, n);
    let mut best = 0;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        let m = measure(&names[..mid], format!("{mid} float"))?;
        let ok = m.ok;
        measured.push(m);
        if ok {
            hi = mid;
            best = measured.len() - 1;
        } else {
            lo = mid;
        }
    }
    // Refinement: each chosen layer, least harmful first (the best SNR of the set), goes
    // back to INT8 if the target still holds without it. A set already measured is not
    // measured again (the bisection's k - 1 is known to miss; all-INT8 missed too).
    let key = |set: &[String]| {
        let mut k = set.to_vec();
        k.sort();
        k
    };
    let mut missed: Vec<Vec<String>> = vec![Vec::new()];
    let mut set = measured[best].float.clone();
    for layer in set.clone().into_iter().rev() {
        let trial: Vec<String> = set.iter().filter(|l| **l != layer).cloned().collect();
        let trial_key = key(&trial);
        if missed.contains(&trial_key) {
            continue;
        }
        if let Some(i) = measured.iter().position(|m| key(&m.float) == trial_key) {
            if measured[i].ok {
                best = i;
                set = trial;
            }
            continue;
        }
        let m = measure(&trial, format!("{} float, without {layer}", trial.len()))?;
        if m.ok {
            set = trial;
            measured.push(m);
            best = measured.len() - 1;
        } else {
            missed.push(trial_key);
        }
    }
    let chosen = measured.remove(best);
    measured.insert(0, chosen);
    Ok(Search {
        measured,
        reachable,
    })
}
