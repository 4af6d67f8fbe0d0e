//! The error a tool returns. It lives at the crate root (every tool author names it), not in `tool`.

/// An error a tool returns. Any `Display` error works as a tool's `Err`; this one also says whether the
/// side effect certainly did not happen, which makes a retry safe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    message: String,
    not_executed: bool,
}

impl ToolError {
    /// A failure whose side effects are unknown.
    pub fn new(message: impl Into<String>) -> Self {
        ToolError { message: message.into(), not_executed: false }
    }

    /// A failure before the side effect happened: a retry is safe.
    pub fn not_executed(message: impl Into<String>) -> Self {
        ToolError { message: message.into(), not_executed: true }
    }

    /// The text the model sees.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether the tool said its side effect certainly did not happen.
    pub fn is_not_executed(&self) -> bool {
        self.not_executed
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ToolError {}
