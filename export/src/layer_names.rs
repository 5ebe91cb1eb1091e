//! `--keep-fp32` names that match no layer: the module names a user could have meant,
//! nearest first, for the error message. Accepts any string; refuses nothing.

/// The module names (every conv and each of its ancestors: `head.conv5c.0`,
/// `head.conv5c`, `head`) a `--keep-fp32` entry can take, nearest to `name` first by edit
/// distance (ties by name), at most `n`.
pub(crate) fn close_layer_names(name: &str, convs: &[String], n: usize) -> Vec<String> {
    let mut modules = std::collections::BTreeSet::new();
    for c in convs {
        let mut end = c.len();
        loop {
            modules.insert(c[..end].to_string());
            match c[..end].rfind('.') {
                Some(i) => end = i,
                None => break,
            }
        }
    }
    let mut scored: Vec<(usize, String)> = modules
        .into_iter()
        .map(|m| (edit_distance(name, &m), m))
        .collect();
    scored.sort();
    scored.into_iter().take(n).map(|(_, m)| m).collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_module_names_first() {
        let convs = ["head.conv5a.0".to_string(), "head.conv5c.0".to_string()];
        let close = close_layer_names("head.conv5", &convs, 3);
        assert_eq!(close, ["head.conv5a", "head.conv5c", "head.conv5a.0"]);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
