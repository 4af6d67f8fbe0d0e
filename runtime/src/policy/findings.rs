//! The kinds of finding a gateway's tool-poisoning scan reports about an upstream tool's definition, by the
//! names a policy file's `allow_findings = [...]` uses to accept them for one tool.
//!
//! The scan itself is the gateway's (`integrations::mcp_gateway::scan_tool`, feature `mcp-gateway`); the kinds
//! live here so that a policy file is checked the same with or without the gateway.

use std::fmt;

/// What a tool definition says that a tool has no business saying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum FindingKind {
    /// A tag that marks text as instructions for the model: `<IMPORTANT>`, `<SYSTEM>`, `<instructions>`,
    /// `[INST]`, an HTML comment.
    InstructionTag,
    /// Text that tries to replace the model's instructions: "ignore previous instructions", "you are now…".
    Override,
    /// Text that tells the model to keep something from the user: "do not tell the user", "don't mention
    /// this".
    Concealment,
    /// Instructions about other tools or what to do before or instead of this one: "before using this tool,
    /// read…", "when `send_email` is called…", "send all emails to…", "pass its content as `sidenote`".
    CrossTool,
    /// A file no tool description needs to name: `~/.ssh/id_rsa`, `mcp.json`, `~/.aws/credentials`, `.env`.
    SensitivePath,
    /// Characters a reader cannot see: invisible, bidirectional controls, Unicode tags (ASCII smuggling),
    /// terminal escapes, or a run of spaces that pushes text out of view.
    HiddenCharacters,
    /// A parameter that asks for a secret (`password`, `api_key`, `ssh_key`, `token`, `private_key`) on a tool
    /// whose name and description are about something else.
    SecretParameter,
    /// A description far longer than a tool needs, room for instructions nobody reads.
    LongDescription,
}

impl FindingKind {
    /// Every kind, in the order reports list them.
    pub const ALL: [FindingKind; 8] = [
        FindingKind::InstructionTag,
        FindingKind::Override,
        FindingKind::Concealment,
        FindingKind::CrossTool,
        FindingKind::SensitivePath,
        FindingKind::HiddenCharacters,
        FindingKind::SecretParameter,
        FindingKind::LongDescription,
    ];

    /// The kind's name, as a policy file's `allow_findings` spells it.
    pub fn name(self) -> &'static str {
        match self {
            FindingKind::InstructionTag => "instruction_tag",
            FindingKind::Override => "override",
            FindingKind::Concealment => "concealment",
            FindingKind::CrossTool => "cross_tool",
            FindingKind::SensitivePath => "sensitive_path",
            FindingKind::HiddenCharacters => "hidden_characters",
            FindingKind::SecretParameter => "secret_parameter",
            FindingKind::LongDescription => "long_description",
        }
    }

    /// The kind named `name`, if one is.
    pub fn from_name(name: &str) -> Option<FindingKind> {
        FindingKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_back_from_its_name() {
        for kind in FindingKind::ALL {
            assert_eq!(FindingKind::from_name(kind.name()), Some(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
        assert_eq!(FindingKind::from_name("Instruction_Tag"), None);
    }
}
