//! A line diff for snapshot failures: what changed, with a little context, instead of two walls of JSON.

/// The lines of `expected` and `actual` that differ: `-` only in `expected`, `+` only in `actual`, with
/// `context` unchanged lines around each change and `@@ line N` headers. Empty when the texts are equal.
pub fn line_diff(expected: &str, actual: &str, context: usize) -> String {
    let old: Vec<&str> = expected.lines().collect();
    let new: Vec<&str> = actual.lines().collect();
    // Longest common subsequence, from the end, so the walk below goes forwards.
    let mut lcs = vec![vec![0usize; new.len() + 1]; old.len() + 1];
    for i in (0..old.len()).rev() {
        for j in (0..new.len()).rev() {
            lcs[i][j] = if old[i] == new[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, usize, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < old.len() || j < new.len() {
        if i < old.len() && j < new.len() && old[i] == new[j] {
            ops.push((' ', i, old[i]));
            i += 1;
            j += 1;
        } else if i < old.len() && (j == new.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            ops.push(('-', i, old[i]));
            i += 1;
        } else {
            ops.push(('+', i, new[j]));
            j += 1;
        }
    }
    // Hunks: each change with `context` lines around it, overlapping ones merged.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for (k, _) in ops.iter().enumerate().filter(|(_, op)| op.0 != ' ') {
        let (start, end) = (k.saturating_sub(context), (k + context + 1).min(ops.len()));
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    let mut out = String::new();
    for (start, end) in hunks {
        out.push_str(&format!("@@ expected line {}\n", ops[start].1 + 1));
        for (sign, _, line) in &ops[start..end] {
            out.push_str(&format!("{sign} {line}\n"));
        }
    }
    out
}
