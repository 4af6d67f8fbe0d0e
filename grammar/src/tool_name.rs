//! The tool-name rule: the strictest of the providers', `^[a-zA-Z0-9_-]{1,64}$`, so a registered name is
//! valid in every dialect.

use std::fmt;

/// The longest name every provider accepts.
pub const MAX_TOOL_NAME_LEN: usize = 64;

/// A name that breaks the rule; its `Display` is the complete, user-facing message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolNameError {
    /// The name is empty.
    Empty,
    /// The name holds a character outside ASCII letters, digits, `_` and `-`.
    BadCharacter {
        /// The name.
        name: String,
        /// The first offending character.
        character: char,
    },
    /// The name is longer than [`MAX_TOOL_NAME_LEN`].
    TooLong {
        /// The name.
        name: String,
    },
}

impl fmt::Display for ToolNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolNameError::Empty => f.write_str("tool name must not be empty"),
            ToolNameError::BadCharacter { name, character } => write!(
                f,
                "tool name `{}` contains `{}`, only ASCII letters, digits, `_` and `-` are accepted by every provider",
                Shown(name),
                character.escape_debug()
            ),
            ToolNameError::TooLong { name } => {
                let length = name.len();
                write!(f, "tool name `{}` is {length} characters long, the limit is {MAX_TOOL_NAME_LEN}", Shown(name))
            }
        }
    }
}

/// A name as a message shows it: control, bidi and other invisible characters escaped (`\u{202e}`), and cut
/// with `…` past twice the limit. The name may come from a server nobody here wrote (a gateway's upstream),
/// whose tool name can be a megabyte long or reorder the line it is printed on.
struct Shown<'a>(&'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(2 * MAX_TOOL_NAME_LEN) {
            None => write!(f, "{}", self.0.escape_debug()),
            Some((cut, _)) => write!(f, "{}…", self.0[..cut].escape_debug()),
        }
    }
}

impl std::error::Error for ToolNameError {}

/// Checks `name` against the rule.
pub fn check_tool_name(name: &str) -> Result<(), ToolNameError> {
    if name.is_empty() {
        return Err(ToolNameError::Empty);
    }
    if let Some(character) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-')) {
        return Err(ToolNameError::BadCharacter { name: name.to_owned(), character });
    }
    // Only ASCII is left, so bytes are characters.
    if name.len() > MAX_TOOL_NAME_LEN {
        return Err(ToolNameError::TooLong { name: name.to_owned() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(name: &str) -> String {
        check_tool_name(name).expect_err("invalid").to_string()
    }

    #[test]
    fn tool_names_follow_the_strictest_provider_rule() {
        assert!(check_tool_name("delete_file-2").is_ok());
        assert!(check_tool_name(&"a".repeat(64)).is_ok());
        assert_eq!(message(""), "tool name must not be empty");
        assert!(message("has space").contains("contains ` `"));
        assert!(check_tool_name("dot.name").is_err());
        assert!(message("ünï").contains("`ü`"));
        // Non-ASCII is reported as a character, never counted in bytes.
        assert!(message(&"é".repeat(40)).contains("`é`"));
        // A name from a server nobody here wrote is shown bounded, what reorders or hides escaped.
        assert_eq!(
            message("a\u{202e}b"),
            "tool name `a\\u{202e}b` contains `\\u{202e}`, only ASCII letters, digits, `_` and `-` are accepted by \
             every provider"
        );
        let long = message(&"a".repeat(1_000_000));
        assert!(
            long.starts_with(&format!("tool name `{}…` is 1000000 characters long", "a".repeat(128))),
            "{long:.200}"
        );
        assert!(long.len() < 300);
        assert_eq!(
            message(&"a".repeat(65)),
            format!("tool name `{}` is 65 characters long, the limit is 64", "a".repeat(65))
        );
    }
}
