//! Masking measured on a corpus nobody here wrote: samples made from gitleaks' rule set
//! (tests/masking/gitleaks/README.md). Reports recall per provider family and the false-positive rate, and
//! holds `Masker::default()` to at least 95 % of the true positives masked and at most 5 % of the false
//! positives changed.

use std::collections::BTreeMap;

use agent_airlock::mask::{MaskSet, Masker};

const TRUE_POSITIVES: &str = include_str!("../../masking/gitleaks/true_positives.tsv");
const FALSE_POSITIVES: &str = include_str!("../../masking/gitleaks/false_positives.tsv");

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, false) => out.push(c),
            _ => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
        }
    }
    out
}

fn rows(tsv: &str, fields: usize) -> Vec<Vec<String>> {
    tsv.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .map(|line| {
            let row: Vec<String> = line.splitn(fields, '\t').map(unescape).collect();
            assert_eq!(row.len(), fields, "{line}");
            row
        })
        .collect()
}

/// A rule's family: the provider its id names (`gitlab-pat` → `gitlab`).
fn family(rule: &str) -> &str {
    rule.split('-').next().unwrap_or(rule)
}

#[derive(Default)]
struct Tally {
    hit: usize,
    all: usize,
}

impl Tally {
    fn add(&mut self, hit: bool) {
        self.hit += usize::from(hit);
        self.all += 1;
    }

    fn rate(&self) -> f64 {
        if self.all == 0 { 0.0 } else { self.hit as f64 / self.all as f64 }
    }
}

/// A true positive is masked when its secret no longer appears in the masked text.
fn recall(set: MaskSet) -> (Tally, Tally, BTreeMap<String, Tally>, Vec<String>) {
    let masker = Masker::default();
    let (mut all, mut bare) = (Tally::default(), Tally::default());
    let mut families: BTreeMap<String, Tally> = BTreeMap::new();
    let mut missed = Vec::new();
    for row in rows(TRUE_POSITIVES, 4) {
        let [rule, shape, secret, text] = &row[..] else { unreachable!() };
        let masked = masker.mask_text(text, set);
        let hit = !masked.contains(secret.as_str());
        all.add(hit);
        if shape == "bare" {
            bare.add(hit);
        }
        families.entry(family(rule).to_owned()).or_default().add(hit);
        if !hit {
            missed.push(format!("{rule} [{shape}] {text:?}"));
        }
    }
    (all, bare, families, missed)
}

fn false_positives(set: MaskSet) -> (Tally, Tally, Vec<String>) {
    let masker = Masker::default();
    let (mut all, mut literal) = (Tally::default(), Tally::default());
    let mut changed = Vec::new();
    for row in rows(FALSE_POSITIVES, 3) {
        let [rule, shape, text] = &row[..] else { unreachable!() };
        let masked = masker.mask_text(text, set);
        let hit = masked != text.as_str();
        all.add(hit);
        if shape == "literal" {
            literal.add(hit);
        }
        if hit {
            changed.push(format!("{rule} [{shape}] {text:?} -> {masked:?}"));
        }
    }
    (all, literal, changed)
}

#[test]
fn gitleaks_corpus_recall_and_false_positives() {
    let (all, bare, families, missed) = recall(MaskSet::SECRETS);
    let (fp, literal, changed) = false_positives(MaskSet::SECRETS);
    let (_, _, _, missed_pii) = recall(MaskSet::SECRETS | MaskSet::PII);
    let (fp_pii, _, changed_pii) = false_positives(MaskSet::SECRETS | MaskSet::PII);
    println!("family\tmasked\tsamples\trecall");
    for (name, tally) in &families {
        println!("{name}\t{}\t{}\t{:.1} %", tally.hit, tally.all, 100.0 * tally.rate());
    }
    println!(
        "secrets: {}/{} true positives masked ({:.1} %), bare tokens {}/{} ({:.1} %)",
        all.hit,
        all.all,
        100.0 * all.rate(),
        bare.hit,
        bare.all,
        100.0 * bare.rate()
    );
    println!(
        "secrets: {}/{} false positives changed ({:.1} %; literal samples {}/{})",
        fp.hit,
        fp.all,
        100.0 * fp.rate(),
        literal.hit,
        literal.all
    );
    println!(
        "secrets,pii: {} true positives missed, {}/{} false positives changed ({:.1} %)",
        missed_pii.len(),
        fp_pii.hit,
        fp_pii.all,
        100.0 * fp_pii.rate()
    );
    for line in missed.iter().take(40) {
        println!("missed: {line}");
    }
    for line in changed.iter().chain(&changed_pii).take(40) {
        println!("changed: {line}");
    }
    assert!(all.rate() >= 0.95, "{:.1} % of gitleaks' true positives masked, want ≥ 95 %", 100.0 * all.rate());
    assert!(fp.rate() <= 0.05, "{:.1} % of gitleaks' false positives changed, want ≤ 5 %", 100.0 * fp.rate());
    assert!(fp_pii.rate() <= 0.05, "{:.1} % changed with secrets,pii, want ≤ 5 %", 100.0 * fp_pii.rate());
}
