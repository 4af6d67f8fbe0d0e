//! `uniqueItems` for the validator, checked in time linear in the array however its items were chosen
//! ([`crate::args::unique`], as the screen checks it).
//!
//! The validator's own check puts the items in a hash set whose hash is not the equality it tests: every number is
//! hashed by its nearest `f64`, so the integers past 2^53 that round to one `f64` hash alike, and an array hashes
//! its items with nothing of its own, so `[]`, `[[]]` and `[[], []]` hash alike too, whatever the set's random
//! keys. A model that sends thousands of such items, all different, made each one be compared with every item
//! before it: 4,000 two-member objects took 1.5 s (a 16 MiB message holds 300,000). The screen checks `uniqueItems`
//! where it reads the schema, before the validator runs; this keyword is the validator's, for every place the
//! keyword applies (under `not`, `if`, `contains`, ...).

use jsonschema::paths::Location;
use jsonschema::{Keyword, ValidationError};
use serde_json::{Map, Value};

use crate::args::unique::first_repeat;

/// The keyword's validator for the schema value `schema` (`uniqueItems`' value): `true` checks, anything else
/// (`false`; the metaschema refuses other values) checks nothing.
pub(super) fn compile<'a>(
    _parent: &'a Map<String, Value>,
    schema: &'a Value,
    _location: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    Ok(Box::new(UniqueItems { enabled: schema == &Value::Bool(true) }))
}

struct UniqueItems {
    enabled: bool,
}

impl<'i> Keyword<'i> for UniqueItems {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        match self.repeat(instance) {
            None => Ok(()),
            Some((first, again)) => Err(ValidationError::custom(format!(
                "items {first} and {again} are equal; every item must differ (`uniqueItems`)"
            ))),
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        self.repeat(instance).is_none()
    }
}

impl UniqueItems {
    /// The first repeated item of `instance` where this keyword checks it (an array, under `uniqueItems: true`).
    fn repeat(&self, instance: &Value) -> Option<(usize, usize)> {
        match instance {
            Value::Array(items) if self.enabled => first_repeat(items),
            _ => None,
        }
    }
}
