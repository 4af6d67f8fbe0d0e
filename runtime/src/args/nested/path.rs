//! Where a value is in a call's arguments, rendered only when a finding names it.

use std::fmt::Write as _;

/// Where a value is in the arguments, built only when a finding names it: each level borrows its key or
/// index from the walk's own stack, so a call that passes builds no path string.
#[derive(Clone, Copy)]
pub(crate) enum Path<'p> {
    /// The top level.
    Root,
    /// The value of `key` in the object at the parent path.
    Key(&'p Path<'p>, &'p str),
    /// Item `index` of the array at the parent path.
    Index(&'p Path<'p>, usize),
}

impl Path<'_> {
    /// `address.zipcode`, `items[2].zipcode`, or just the key at the top level.
    pub(crate) fn render(&self) -> String {
        let mut out = String::with_capacity(self.len());
        self.write(&mut out);
        out
    }

    /// The rendered length in bytes (possibly an overestimate by a dot).
    fn len(&self) -> usize {
        match self {
            Path::Root => 0,
            Path::Key(parent, key) => parent.len() + 1 + key.len(),
            // `[`, up to 20 digits, `]`.
            Path::Index(parent, _) => parent.len() + 22,
        }
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root => {}
            Path::Key(parent, key) => {
                parent.write(out);
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                let _ = write!(out, "[{index}]");
            }
        }
    }
}
