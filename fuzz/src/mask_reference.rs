//! The slow masking reference, shared by the fuzz checks and `tests/tests/masking/masking_corpus.rs` (which
//! includes this file).

use agent_airlock::mask::{MaskSet, Masker};

/// The slow reference for a masker writing type tags: detect, replace each finding by its tag, and detect
/// again in the result, until nothing is found. The masker scans once; the two agree only if no verdict
/// depends on whether a neighbour was masked.
///
/// # Panics
///
/// When masking does not settle within one pass per byte of `text` (every productive pass replaces text no
/// pass wrote).
pub fn reference_mask_text(masker: &Masker, text: &str, set: MaskSet) -> String {
    let mut text = text.to_owned();
    for _ in 0..=text.len() {
        let found = masker.detect(&text, set);
        if found.is_empty() {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        let mut copied = 0;
        for detection in found {
            out.push_str(&text[copied..detection.range.start]);
            out.push_str(detection.kind.tag());
            copied = detection.range.end;
        }
        out.push_str(&text[copied..]);
        text = out;
    }
    panic!("masking does not settle for {text:?}");
}
