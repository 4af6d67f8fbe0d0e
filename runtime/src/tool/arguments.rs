//! The arguments of one call and what can be wrong with them.

use serde_json::Value;

/// How deep an argument object may nest. Deeper input is refused before it is deserialized.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// The arguments of one call: a JSON object, after ghost stripping.
pub type Arguments = serde_json::Map<String, Value>;

/// The most declared parameters a tool may have for the dispatcher to hand it [`ArgumentTexts`].
pub(crate) const MAX_TEXT_PARAMS: usize = 32;

/// The JSON text of each declared parameter's value in one call, by the parameter's position among the
/// spec's [`params`](crate::tool::ToolSpec::params): what [`Tool::prepare_text`](crate::tool::Tool::prepare_text)
/// reads. The dispatcher builds it only from arguments sent as JSON text that gate 3's screen would admit
/// unchanged (every key declared at every depth the schema closes, no repeated key at the top level, no
/// top-level `null`, no set, nothing too deep), so the texts are exactly the values the screened map would
/// hold.
#[derive(Debug, Clone, Copy)]
pub struct ArgumentTexts<'t> {
    texts: [Option<&'t str>; MAX_TEXT_PARAMS],
}

impl<'t> ArgumentTexts<'t> {
    /// No parameter's value sent.
    pub(crate) fn new() -> Self {
        ArgumentTexts { texts: [None; MAX_TEXT_PARAMS] }
    }

    /// Sets the text of the parameter at `position`; `false` if it was set already (a key sent twice).
    pub(crate) fn set(&mut self, position: usize, text: &'t str) -> bool {
        match self.texts.get_mut(position) {
            Some(slot @ None) => {
                *slot = Some(text);
                true
            }
            _ => false,
        }
    }

    /// The JSON text of the value sent for the parameter at `position` (one complete JSON value, as the
    /// model wrote it); `None` when it was not sent.
    pub fn get(&self, position: usize) -> Option<&'t str> {
        self.texts.get(position).copied().flatten()
    }
}

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
