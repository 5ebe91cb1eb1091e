//! The search over mixes (module docs of [`super`], step 3): all candidates float, then
//! bisection over how many of the worst stay float, then a refinement that returns the
//! least harmful of the chosen layers to INT8, one at a time, when the target still holds
//! without them.
//!
//! The refinement is bounded like the bisection, `ceil(log2 N)` trials: where the metric
//! is not monotonic in k (on a random-weight DANet-R18 the bisection needed all 39
//! layers float, and 4 could go back, found at the 25th and later trials), trying every
//! chosen layer cost k - 1 evaluations, 45 in all and 8.7 times the all-INT8
//! calibration's wall time.

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
/// one): all candidates float, the bisection's `ceil(log2(candidates))`, and as many
/// refinement trials.
pub fn search_bound(candidates: usize) -> usize {
    if candidates == 0 {
        return 0;
    }
    1 + 2 * log2_ceil(candidates)
}

fn log2_ceil(n: usize) -> usize {
    (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize
}

/// [`search`] over `names` (the worst candidates) and, when no mix of them meets the
/// target, over `every` quantised layer (worst first; all float is a valid answer), after
/// telling `widening`. The chosen mix (the wider search's first) leads the measured
/// mixes, the narrower search's follow. Returns the search and whether it widened.
pub(super) fn search_widening(
    names: &[String],
    every: &[String],
    measure: &mut dyn FnMut(&[String], String) -> Result<Measured, CalibrationError>,
    widening: &mut dyn FnMut(),
) -> Result<(Search, bool), CalibrationError> {
    let narrow = search(names, measure)?;
    if narrow.reachable || every.len() <= names.len() {
        return Ok((narrow, false));
    }
    widening();
    let wider = search(every, measure)?;
    let measured = wider.measured.into_iter().chain(narrow.measured).collect();
    Ok((
        Search {
            measured,
            reachable: wider.reachable,
        },
        true,
    ))
}

/// Searches `names` (worst SNR first, at least one); `measure` evaluates a set of float
/// layers, described for the log.
fn search(
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
    // Refinement: the chosen layers, least harmful first (the best SNR of the set), go
    // back to INT8 one at a time if the target still holds without them, for at most
    // ceil(log2 N) trials. A set already measured is not measured again (the bisection's
    // k - 1 is known to miss; all-INT8 missed too).
    let key = |set: &[String]| {
        let mut k = set.to_vec();
        k.sort();
        k
    };
    let mut missed: Vec<Vec<String>> = vec![Vec::new()];
    let mut set = measured[best].float.clone();
    let mut trials = log2_ceil(n);
    for layer in set.clone().into_iter().rev() {
        if trials == 0 {
            break;
        }
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
        trials -= 1;
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
