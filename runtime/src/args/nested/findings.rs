//! What the walk finds: keys no alternative declares (ghosts), a set's repeated items, integers outside a
//! dialect's bounds; and the declared key a ghost most resembles, for a refusal's hint.

/// A key no schema alternative at its place declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ghost {
    /// Where: `address.zipcode`, `items[2].zipcode`, or just the key at the top level.
    pub(crate) path: String,
    /// The declared key it most resembles, if one is close (a likely typo).
    pub(crate) closest: Option<String>,
}

/// An array the schema says holds unique items, with an item repeated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Duplicate {
    /// The array's path.
    pub(crate) path: String,
    /// The repeated item, as JSON text (capped for display).
    pub(crate) item: String,
}

/// An integer inside the canonical schema's bounds but outside those the call's dialect states.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OutOfRange {
    /// Where: `count`, `items[2].count`.
    pub(crate) path: String,
    /// The integer as sent.
    pub(crate) value: String,
    /// The bounds the dialect states, as JSON text (`None`: unbounded on that side).
    pub(crate) min: Option<String>,
    pub(crate) max: Option<String>,
}

/// The declared name closest to `ghost`, when it is near enough to be a typo (at most two edits) or one
/// name extends the other (`zipcode` for `zip`).
pub(crate) fn closest<'a>(ghost: &str, declared: impl IntoIterator<Item = &'a str>) -> Option<String> {
    declared
        .into_iter()
        .filter_map(|name| {
            let distance = strsim::damerau_levenshtein(ghost, name);
            let (short, long) = if ghost.len() < name.len() { (ghost, name) } else { (name, ghost) };
            let extends = short.chars().count() >= 3 && long.starts_with(short);
            (distance <= 2 || extends).then_some((distance, name))
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.to_owned())
}
