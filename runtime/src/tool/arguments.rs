//! The arguments of one call and what can be wrong with them.

use serde_json::Value;

/// How deep an argument object may nest. Deeper input is refused before it is deserialized.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// The arguments of one call: a JSON object, after ghost stripping.
pub type Arguments = serde_json::Map<String, Value>;

/// Every problem found while preparing a call's arguments and injected values.
#[derive(Debug, Default)]
pub struct ArgumentErrors {
    errors: Vec<ArgumentError>,
}

/// One bad argument or missing injected value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgumentError {
    /// A required argument is absent (or `null`).
    Missing {
        /// The argument's key.
        field: String,
    },
    /// An argument did not deserialize into the declared type.
    Invalid {
        /// The argument's key, with the path inside it where the error is (`address.zip`).
        field: String,
        /// What serde said, e.g. ``invalid type: string "5", expected u32``.
        message: String,
    },
    /// The host did not supply an injected value.
    Injection {
        /// The parameter's name.
        param: String,
        /// What was missing.
        message: String,
    },
}

impl ArgumentErrors {
    /// No errors yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one error.
    pub fn push(&mut self, error: ArgumentError) {
        self.errors.push(error);
    }

    /// The errors, in parameter order.
    pub fn errors(&self) -> &[ArgumentError] {
        &self.errors
    }

    /// Whether any error is the host's, not the model's.
    pub fn is_host_error(&self) -> bool {
        self.errors.iter().any(|e| matches!(e, ArgumentError::Injection { .. }))
    }
}
