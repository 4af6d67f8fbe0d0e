//! What masking did: counts per kind, never the values.

use std::fmt;

use serde::ser::SerializeMap;

use super::{MaskKind, MaskSet};

/// How many values of each kind were masked. Holds no masked value, so it can go to logs and audit records.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct MaskReport {
    counts: [u32; MaskKind::COUNT],
}

impl MaskReport {
    /// An empty report.
    pub fn new() -> MaskReport {
        MaskReport::default()
    }

    /// Values of `kind` masked.
    pub fn count(&self, kind: MaskKind) -> u32 {
        self.counts[kind.index()]
    }

    /// Values masked in all.
    pub fn total(&self) -> u32 {
        self.counts.iter().fold(0u32, |sum, &n| sum.saturating_add(n))
    }

    /// Whether nothing was masked.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// The kinds masked at least once.
    pub fn kinds(&self) -> MaskSet {
        self.iter().fold(MaskSet::NONE, |set, (kind, _)| set | MaskSet::of(kind))
    }

    /// The kinds masked at least once with their counts, in [`MaskKind::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (MaskKind, u32)> + '_ {
        MaskKind::ALL.into_iter().map(|kind| (kind, self.count(kind))).filter(|&(_, n)| n > 0)
    }

    /// Adds `other`'s counts to this report's.
    pub fn merge(&mut self, other: &MaskReport) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine = mine.saturating_add(theirs);
        }
    }

    pub(crate) fn record(&mut self, kind: MaskKind) {
        let slot = &mut self.counts[kind.index()];
        *slot = slot.saturating_add(1);
    }
}

impl fmt::Debug for MaskReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter().map(|(kind, n)| (kind.name(), n))).finish()
    }
}

/// A map from kind name to count, kinds never masked left out: `{"email": 2, "jwt": 1}`.
impl serde::Serialize for MaskReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        for (kind, n) in self.iter() {
            map.serialize_entry(kind.name(), &n)?;
        }
        map.end()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    #[test]
    fn counts_and_merges() {
        let mut a = MaskReport::new();
        assert!(a.is_empty());
        a.record(MaskKind::Email);
        a.record(MaskKind::Email);
        let mut b = MaskReport::new();
        b.record(MaskKind::Jwt);
        a.merge(&b);
        assert_eq!(a.count(MaskKind::Email), 2);
        assert_eq!(a.total(), 3);
        assert_eq!(a.kinds(), MaskSet::of(MaskKind::Email) | MaskSet::of(MaskKind::Jwt));
        assert_eq!(format!("{a:?}"), r#"{"jwt": 1, "email": 2}"#);
        assert_eq!(serde_json::to_string(&a).unwrap(), r#"{"jwt":1,"email":2}"#);
    }
}
