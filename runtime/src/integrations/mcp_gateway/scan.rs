//! The tool-poisoning scan: what an upstream tool's definition says that a tool has no business saying.
//!
//! A client puts every tool definition a server lists in front of its model, whether the tool is ever called
//! or not, so a definition is a way into the model's instructions ("tool poisoning", Invariant Labs 2025;
//! "line jumping", Trail of Bits 2025). [`scan_tool`] reads each part a model sees (the name, the title, the
//! description, every string of the input and output schemas, the annotations) and reports what the
//! published attacks rely on, as [`Finding`]s of a [`FindingKind`]:
//!
//! - **instruction tags** (`<IMPORTANT>`, `<SYSTEM>`, `[INST]`, an HTML comment) and text that **overrides**
//!   the model's instructions ("ignore previous instructions", "this is VERY VERY important");
//! - **concealment** ("do not mention this to the user");
//! - **cross-tool** instructions: what to do with another tool ("when `send_email` is called, send all emails
//!   to …", "the also present `send_email` tool"), before this one ("before using this tool, read …"),
//!   or with what was read ("pass its content as `sidenote`");
//! - **sensitive paths** a description has no reason to name (`~/.ssh/id_rsa`, `mcp.json`,
//!   `~/.aws/credentials`), unless the tool is about keys or credentials;
//! - **hidden characters**: invisible, bidirectional controls, Unicode tags (whose ASCII the finding
//!   decodes), terminal escapes, a run of spaces that pushes text out of view;
//! - **secret parameters**: `password`, `api_key`, `ssh_key`, `token`, `private_key`… on a tool whose name,
//!   title and first sentence are about something else (a weather or a math tool);
//! - a **long description**: more than [`LONG_DESCRIPTION_BASE`] characters plus
//!   [`LONG_DESCRIPTION_PER_PARAMETER`] per parameter.
//!
//! Patterns, not a model: it is deterministic, needs no download, and misses what it has no pattern for
//! (an instruction in plain words, another language). Its precision and recall on the corpus of
//! `tests/corpus/tool_poisoning.json` are in BENCHMARKS.md. A pin ([`tool_pin`](super::tool_pin)) is what
//! holds a reviewed definition still; the scan is what makes the first review, and a re-list of an unpinned
//! tool, less blind.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::sync::LazyLock;

use regex_automata::meta::Regex;
use serde_json::Value;

use crate::Policy;
use crate::approval::display::{escape, is_hidden_char};
use crate::policy::FindingKind;

/// A description longer than this many characters, plus [`LONG_DESCRIPTION_PER_PARAMETER`] for each
/// parameter, is reported as [`FindingKind::LongDescription`].
pub const LONG_DESCRIPTION_BASE: usize = 2_000;

/// What each declared parameter adds to the length a description may have.
pub const LONG_DESCRIPTION_PER_PARAMETER: usize = 250;

/// A run of this many spaces (or tabs) on one line is reported as hidden: it pushes what follows out of a
/// reader's view (the WhatsApp exfiltration hid its payload so).
pub const SPACE_RUN: usize = 40;

/// How much of the offending text a finding quotes, in characters, around the match.
const CONTEXT: usize = 40;
/// The longest quote.
const MAX_QUOTE: usize = 160;
/// The most characters of one key a finding's location names; a longer key is cut there, with `…`.
const MAX_LOCATION_KEY: usize = 64;
/// About the longest location, in bytes: the members past it are not named (one `…` stands for them), so a
/// listing nested deep with long keys cannot make each level of the walk, and each finding, hold a copy of all
/// the keys above it (a 10 MB listing would have held ~500 MB).
const MAX_LOCATION: usize = 1024;

/// One thing a tool's definition says that it has no business saying.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What kind of thing.
    pub kind: FindingKind,
    /// Where in the definition, as a path of its members: `description`, `inputSchema.properties.sidenote`,
    /// `inputSchema.properties.a.description`, `annotations.title`.
    pub location: String,
    /// The offending text, raw (hidden characters included); [`Display`](fmt::Display) escapes it.
    pub text: String,
    /// What the finding adds to the text: what Unicode tags decode to, how long a description is.
    pub note: Option<String>,
}

impl fmt::Display for Finding {
    /// `kind in location: "text"` (the text escaped: hidden characters as `\u{…}`, one line), then the note.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = escape(&self.text).replace('\n', "\\n");
        write!(f, "{} in {}: \"{}\"", self.kind, escape(&self.location), text)?;
        if let Some(note) = &self.note {
            write!(f, " ({})", escape(note))?;
        }
        Ok(())
    }
}

/// Scans an upstream tool's definition; its findings, at most one of each kind for each location.
pub fn scan_tool(tool: &rmcp::model::Tool) -> Vec<Finding> {
    match serde_json::to_value(tool) {
        Ok(definition) => scan_definition(&definition),
        // Only a definition that is not JSON fails to serialise; say so rather than pass it.
        Err(error) => vec![Finding {
            kind: FindingKind::HiddenCharacters,
            location: "definition".to_owned(),
            text: tool.name.to_string(),
            note: Some(format!("the definition cannot be read as JSON: {error}")),
        }],
    }
}

/// Scans a tool's definition as MCP's `tools/list` gives it (`name`, `title`, `description`, `inputSchema`,
/// `outputSchema`, `annotations`, `_meta`, `icons`).
pub fn scan_definition(definition: &Value) -> Vec<Finding> {
    let mut scan = Scan { findings: Vec::new(), found: HashSet::new(), own_path: String::new() };
    let text = |key: &str| definition.get(key).and_then(Value::as_str).unwrap_or("");
    let (name, title, description) = (text("name"), text("title"), text("description"));
    let topic = Topic::of(name, title, description);

    scan.hidden("name", name);
    scan.text("title", title, &topic);
    scan.text("description", description, &topic);
    let parameters = definition.pointer("/inputSchema/properties").and_then(Value::as_object);
    scan.long_description(description, parameters.map_or(0, serde_json::Map::len));
    if let Some(schema) = definition.get("inputSchema") {
        scan.schema("inputSchema", schema, &topic, true);
    }
    if let Some(schema) = definition.get("outputSchema") {
        scan.schema("outputSchema", schema, &topic, false);
    }
    if let Some(annotations) = definition.get("annotations") {
        scan.strings("annotations", annotations, &topic);
    }
    scan.extras(definition, &topic);
    scan.findings
}

/// Scans a resource as `resources/list` lists it (a client may put the list before its model): its name, title
/// and description read as a tool's are, its URI and MIME type for hidden characters, its annotations; a
/// sensitive path its text names is no finding when it is in the resource's own URI (a resource is a file, or
/// like one).
pub fn scan_resource(resource: &rmcp::model::Resource) -> Vec<Finding> {
    scan_listing(serde_json::to_value(resource), &resource.name)
}

/// Scans a resource template as `resources/templates/list` lists it, as [`scan_resource`] does.
pub fn scan_resource_template(template: &rmcp::model::ResourceTemplate) -> Vec<Finding> {
    scan_listing(serde_json::to_value(template), &template.name)
}

/// Scans a prompt as `prompts/list` lists it: its name, title and description, and each argument's name,
/// title and description as a tool's parameters (an argument asking for a secret of a prompt about
/// something else is [`FindingKind::SecretParameter`]).
pub fn scan_prompt(prompt: &rmcp::model::Prompt) -> Vec<Finding> {
    scan_listing(serde_json::to_value(prompt), &prompt.name)
}

fn scan_listing(entry: serde_json::Result<Value>, name: &str) -> Vec<Finding> {
    let entry = match entry {
        Ok(entry) => entry,
        Err(error) => {
            return vec![Finding {
                kind: FindingKind::HiddenCharacters,
                location: "definition".to_owned(),
                text: name.to_owned(),
                note: Some(format!("the listing cannot be read as JSON: {error}")),
            }];
        }
    };
    let text = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or("");
    // A resource names a file, or something like one: the sensitive path in its own URI is no sign of
    // poisoning when its text names it. (A prompt has no URI.)
    let own_path = format!("{} {}", text("uri"), text("uriTemplate")).trim().to_lowercase();
    let mut scan = Scan { findings: Vec::new(), found: HashSet::new(), own_path };
    let (title, description) = (text("title"), text("description"));
    let topic = Topic::of(name, title, description);
    for key in ["uri", "uriTemplate", "mimeType"] {
        scan.hidden(key, text(key));
    }
    // A client shows a resource's or prompt's name where it has no title: read as its text is.
    scan.text("name", name, &topic);
    scan.text("title", title, &topic);
    scan.text("description", description, &topic);
    let arguments = entry.get("arguments").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    scan.long_description(description, arguments.len());
    for argument in arguments {
        let argument_name = argument.get("name").and_then(Value::as_str).unwrap_or("");
        let at = format!("arguments.{argument_name}");
        scan.hidden(&at, argument_name);
        if !topic.credentials && is_secret_name(argument_name) {
            let note = format!("asks for a secret; the prompt is about \"{}\"", topic.shown);
            scan.push(FindingKind::SecretParameter, &at, argument_name.to_owned(), Some(note));
        }
        for key in ["title", "description"] {
            if let Some(text) = argument.get(key).and_then(Value::as_str) {
                scan.text(&format!("{at}.{key}"), text, &topic);
            }
        }
    }
    if let Some(annotations) = entry.get("annotations") {
        scan.strings("annotations", annotations, &topic);
    }
    scan.extras(&entry, &topic);
    scan.findings
}

/// The findings a deployment accepts, by exact tool name (a policy file's `allow_findings`): a gateway hides
/// a tool with any other finding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedFindings {
    by_tool: BTreeMap<String, BTreeSet<FindingKind>>,
}

impl AllowedFindings {
    /// None: every tool with a finding is hidden.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts findings of `kind` on the tool named exactly `tool`.
    #[must_use]
    pub fn allow(mut self, tool: impl Into<String>, kind: FindingKind) -> Self {
        self.by_tool.entry(tool.into()).or_default().insert(kind);
        self
    }

    /// What `policy`'s `allow_findings` accept.
    pub fn from_policy(policy: &Policy) -> Self {
        AllowedFindings { by_tool: policy.allowed_findings().clone() }
    }

    /// The kinds accepted on `tool`.
    pub fn for_tool(&self, tool: &str) -> Option<&BTreeSet<FindingKind>> {
        self.by_tool.get(tool)
    }

    /// Splits `tool`'s findings into those that hide it and those accepted.
    pub fn split(&self, tool: &str, findings: Vec<Finding>) -> (Vec<Finding>, Vec<Finding>) {
        split_accepted(self.by_tool.get(tool), findings)
    }
}

/// The most findings a warning about one listing entry names; the rest are counted.
const FINDINGS_LOGGED: usize = 16;

/// `findings` as a warning shows them: the first [`FINDINGS_LOGGED`], then how many more (an upstream's entry can
/// carry tens of thousands, each up to ~1.5 KB shown: one log line per entry must stay readable).
pub(crate) fn findings_logged(findings: &[Finding]) -> Vec<String> {
    let mut shown: Vec<String> = findings.iter().take(FINDINGS_LOGGED).map(ToString::to_string).collect();
    if findings.len() > FINDINGS_LOGGED {
        shown.push(format!("and {} more", findings.len() - FINDINGS_LOGGED));
    }
    shown
}

/// `findings` split into those the `accepted` kinds do not cover (which hide what has them) and those they do.
pub(crate) fn split_accepted(
    accepted: Option<&BTreeSet<FindingKind>>,
    findings: Vec<Finding>,
) -> (Vec<Finding>, Vec<Finding>) {
    findings.into_iter().partition(|finding| !accepted.is_some_and(|kinds| kinds.contains(&finding.kind)))
}

struct Scan {
    findings: Vec<Finding>,
    /// The kind and location of each finding: one finding of a kind per location, found in constant time (a
    /// listing with many findings made the check quadratic: 16,000 took 0.4 s).
    found: HashSet<(FindingKind, String)>,
    /// A resource's URI, lower-cased: a sensitive path it holds is the resource's own, named by its text
    /// as a matter of course, not a finding (another one is).
    own_path: String,
}

impl Scan {
    fn push(&mut self, kind: FindingKind, location: &str, text: String, note: Option<String>) {
        if self.found.insert((kind, location.to_owned())) {
            self.findings.push(Finding { kind, location: location.to_owned(), text, note });
        }
    }

    /// A description longer than its parameters (or a prompt's arguments) account for.
    fn long_description(&mut self, description: &str, count: usize) {
        let length = description.chars().count();
        let limit = LONG_DESCRIPTION_BASE + LONG_DESCRIPTION_PER_PARAMETER * count;
        if length > limit {
            let quote: String = description.chars().take(MAX_QUOTE).collect();
            let note = format!("{length} characters; at most {limit} for one with {count} parameter(s)");
            self.push(FindingKind::LongDescription, "description", quote, Some(note));
        }
    }

    /// Hidden characters and runs of spaces in `text`.
    fn hidden(&mut self, location: &str, text: &str) {
        let hidden = hidden_chars(text);
        if let Some(&at) = hidden.first() {
            let count = hidden.len();
            let tags: String = text
                .chars()
                .filter_map(|c| match u32::from(c) {
                    tag @ 0xE0020..=0xE007E => char::from_u32(tag - 0xE0000),
                    _ => None,
                })
                .collect();
            let note = if tags.is_empty() {
                format!("{count} hidden character(s)")
            } else {
                format!("{count} hidden character(s); the Unicode tags spell \"{tags}\"")
            };
            self.push(FindingKind::HiddenCharacters, location, quote(text, at, at), Some(note));
        }
        let mut run = 0;
        for (at, c) in text.char_indices() {
            run = if c == ' ' || c == '\t' { run + 1 } else { 0 };
            if run == SPACE_RUN {
                let note = format!("a run of {SPACE_RUN} or more spaces pushes what follows out of view");
                self.push(FindingKind::HiddenCharacters, location, quote(text, at, at), Some(note));
                break;
            }
        }
    }

    /// Every check of text a model reads.
    fn text(&mut self, location: &str, text: &str, topic: &Topic) {
        if text.is_empty() {
            return;
        }
        self.hidden(location, text);
        // Patterns read the text as a reader would: hidden characters dropped (a zero-width space inside
        // "ig\u{200B}nore" hides nothing from the model), Unicode tags read as the ASCII they smuggle,
        // blanks folded into one space.
        let mut visible = String::with_capacity(text.len());
        let mut blank = false;
        for c in text.chars() {
            let c = match u32::from(c) {
                tag @ 0xE0020..=0xE007E => char::from_u32(tag - 0xE0000).unwrap_or(' '),
                _ if c.is_whitespace() => ' ',
                _ if is_hidden_char(c) => continue,
                _ => c,
            };
            if c == ' ' && blank {
                continue;
            }
            blank = c == ' ';
            visible.push(c);
        }
        for (kind, regex) in PATTERNS.iter() {
            if *kind == FindingKind::SensitivePath && topic.credentials {
                continue;
            }
            let own = |found: &regex_automata::Match| {
                let path = visible[found.range()].to_lowercase();
                let path = path.trim_start_matches('~').trim_start_matches('/');
                *kind == FindingKind::SensitivePath && !path.is_empty() && self.own_path.contains(path)
            };
            if let Some(found) = regex.find_iter(visible.as_str()).find(|found| !own(found)) {
                self.push(*kind, location, quote(&visible, found.start(), found.end()), None);
            }
        }
    }

    /// Every string of a schema (or of annotations); with `parameters`, its property names are checked for
    /// secrets too.
    fn schema(&mut self, location: &str, schema: &Value, topic: &Topic, parameters: bool) {
        match schema {
            Value::Object(map) => {
                for (key, value) in map {
                    let here = member(location, key);
                    if key == "properties"
                        && let Value::Object(properties) = value
                    {
                        for (name, property) in properties {
                            let at = member(&here, name);
                            self.hidden(&at, name);
                            if parameters && !topic.credentials && is_secret_name(name) {
                                self.push(
                                    FindingKind::SecretParameter,
                                    &at,
                                    name.clone(),
                                    Some(format!("asks for a secret; the tool is about \"{}\"", topic.shown)),
                                );
                            }
                            self.schema(&at, property, topic, parameters);
                        }
                        continue;
                    }
                    match (key.as_str(), value) {
                        // Machine-read members: only what hides.
                        ("type" | "$schema" | "$ref" | "$id" | "format" | "pattern", Value::String(text)) => {
                            self.hidden(&here, text);
                        }
                        _ => self.schema(&here, value, topic, parameters),
                    }
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.schema(&element(location, index), item, topic, parameters);
                }
            }
            Value::String(text) => self.text(location, text, topic),
            _ => {}
        }
    }

    fn strings(&mut self, location: &str, value: &Value, topic: &Topic) {
        self.schema(location, value, topic, false);
    }

    /// What a listed entry carries besides its text: `_meta` (some clients show parts of it, or pass it on to
    /// their model), each of its keys for what hides and each string as text; and `icons`, machine-read (a
    /// URI, a MIME type, sizes), for what hides.
    fn extras(&mut self, entry: &Value, topic: &Topic) {
        if let Some(meta) = entry.get("_meta") {
            self.keys_and_strings("_meta", meta, Some(topic));
        }
        if let Some(Value::Array(icons)) = entry.get("icons") {
            for (index, icon) in icons.iter().enumerate() {
                self.keys_and_strings(&format!("icons[{index}]"), icon, None);
            }
        }
    }

    /// Every key of `value` for what hides, and every string read as text about `topic` (or, without one,
    /// for what hides only).
    fn keys_and_strings(&mut self, location: &str, value: &Value, topic: Option<&Topic>) {
        match value {
            Value::Object(map) => {
                for (key, value) in map {
                    let here = member(location, key);
                    self.hidden(&here, key);
                    self.keys_and_strings(&here, value, topic);
                }
            }
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    self.keys_and_strings(&element(location, index), item, topic);
                }
            }
            Value::String(text) => match topic {
                Some(topic) => self.text(location, text, topic),
                None => self.hidden(location, text),
            },
            _ => {}
        }
    }
}

/// The location of `key`'s member of the object at `location`: `location.key`, the key cut to
/// [`MAX_LOCATION_KEY`] characters, and nothing more named once the location is [`MAX_LOCATION`] long.
fn member(location: &str, key: &str) -> String {
    bounded(location, |out| {
        out.push('.');
        let mut chars = key.chars();
        out.extend(chars.by_ref().take(MAX_LOCATION_KEY));
        if chars.next().is_some() {
            out.push('…');
        }
    })
}

/// The location of the array at `location`'s item `index`: `location[index]`, within [`MAX_LOCATION`].
fn element(location: &str, index: usize) -> String {
    bounded(location, |out| {
        use std::fmt::Write as _;
        let _ = write!(out, "[{index}]");
    })
}

/// `location` with `add` written after it, or, past [`MAX_LOCATION`], with `…` in place of all that follows.
fn bounded(location: &str, add: impl FnOnce(&mut String)) -> String {
    const PAST: &str = ".…";
    if location.len() >= MAX_LOCATION {
        let mut out = location.to_owned();
        if !out.ends_with(PAST) {
            out.push_str(PAST);
        }
        return out;
    }
    let mut out = location.to_owned();
    add(&mut out);
    out
}

/// Where `text` has characters a reader cannot see: [hidden](is_hidden_char) ones but newlines and tabs,
/// and but what draws an emoji (a variation selector after a symbol, a zero-width joiner between two: `⚠️`,
/// `👩‍💻`).
fn hidden_chars(text: &str) -> Vec<usize> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let symbol = |i: Option<usize>| {
        i.and_then(|i| chars.get(i)).is_some_and(|&(_, c)| u32::from(c) >= 0x2000 && !is_hidden_char(c))
    };
    chars
        .iter()
        .enumerate()
        .filter(|&(i, &(_, c))| {
            is_hidden_char(c)
                && !matches!(c, '\n' | '\t' | '\r')
                && !(matches!(c, '\u{FE0E}' | '\u{FE0F}') && symbol(i.checked_sub(1)))
                && !(c == '\u{200D}' && symbol(i.checked_sub(1)) && symbol(Some(i + 1)))
        })
        .map(|(_, &(at, _))| at)
        .collect()
}

/// About `text[start..end]`: the match with some context, cut to [`MAX_QUOTE`] characters.
fn quote(text: &str, start: usize, end: usize) -> String {
    let before: Vec<char> = text[..start].chars().rev().take(CONTEXT).collect();
    let mut out: String = before.into_iter().rev().collect();
    out.extend(text[start..end].chars().take(MAX_QUOTE));
    out.extend(text[end..].chars().take(CONTEXT));
    let out = out.trim();
    if out.chars().count() > MAX_QUOTE { out.chars().take(MAX_QUOTE).collect() } else { out.to_owned() }
}

/// What a tool is about, as its name, title and first sentence say (not the rest of its description, where
/// an attack would put the words that excuse it).
struct Topic {
    /// The tool is about keys, credentials, accounts or connections: asking for a secret, or naming a key
    /// file, is its business.
    credentials: bool,
    /// The words, as shown in a finding.
    shown: String,
}

impl Topic {
    fn of(name: &str, title: &str, description: &str) -> Topic {
        let first = description
            .split(['\n', '<'])
            .next()
            .unwrap_or("")
            .split(". ")
            .next()
            .unwrap_or("")
            .trim()
            .trim_end_matches('.');
        // A path is not what the tool is about: `~/.git-credentials` in a sentence does not make it a
        // credentials tool.
        let prose: Vec<&str> = first
            .split_whitespace()
            .filter(|token| !token.contains(['/', '~']) && !token.starts_with(['.', '`']))
            .collect();
        let mut all = words(name);
        all.extend(words(title));
        all.extend(words(&prose.join(" ")));
        let credentials = all.iter().any(|word| CREDENTIAL_TOPICS.contains(&word.as_str()))
            || is_secret_name(name)
            || is_secret_name(title);
        let shown: String = if first.is_empty() { name.to_owned() } else { format!("{name}: {first}") };
        Topic { credentials, shown: shown.chars().take(80).collect() }
    }
}

/// Words that make asking for a secret a tool's business.
const CREDENTIAL_TOPICS: &[&str] = &[
    "auth",
    "authenticate",
    "authentication",
    "authorize",
    "authorization",
    "login",
    "logon",
    "signin",
    "signup",
    "register",
    "credential",
    "credentials",
    "password",
    "passwords",
    "passphrase",
    "secret",
    "secrets",
    "token",
    "tokens",
    "apikey",
    "keychain",
    "keyring",
    "keystore",
    "vault",
    "ssh",
    "gpg",
    "pgp",
    "encrypt",
    "decrypt",
    "encryption",
    "cipher",
    "sign",
    "signature",
    "oauth",
    "sso",
    "session",
    "account",
    "accounts",
    "user",
    "users",
    "connect",
    "connection",
    "database",
    "postgres",
    "postgresql",
    "mysql",
    "smtp",
    "imap",
    "ftp",
    "sftp",
    "git",
    "clone",
    "deploy",
    "wallet",
    "wifi",
    "jwt",
    "certificate",
    "tls",
    "mfa",
    "otp",
    "totp",
    "registry",
];

/// `text` as lower-case words: split at anything but letters and digits, and where camelCase turns.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous_lower && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
            word.extend(c.to_lowercase());
        } else {
            previous_lower = false;
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether a parameter's name asks for a secret: `password`, `api_key`, `apiKey`, `ssh_key`, `private_key`,
/// `access_token` (not `max_tokens` nor `page_token`), `id_rsa`, `seed_phrase`, `cookie`…
fn is_secret_name(name: &str) -> bool {
    const SECRET: &[&str] = &[
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "secret",
        "credential",
        "credentials",
        "mnemonic",
        "privkey",
        "apikey",
        "rsa",
        "cookie",
        "cvv",
        "authorization",
    ];
    const KEYED: &[&str] =
        &["ssh", "private", "secret", "api", "access", "signing", "gpg", "pgp", "encryption", "master"];
    const NOT_SECRET_TOKEN: &[&str] =
        &["max", "page", "next", "prev", "previous", "continuation", "pagination", "cursor", "sync", "num", "count"];
    let words = words(name);
    words.iter().enumerate().any(|(i, word)| {
        let before = i.checked_sub(1).and_then(|j| words.get(j)).map(String::as_str);
        let after = words.get(i + 1).map(String::as_str);
        match word.as_str() {
            w if SECRET.contains(&w) => true,
            "key" | "keys" => before.is_some_and(|b| KEYED.contains(&b)),
            "token" => {
                !before.is_some_and(|b| NOT_SECRET_TOKEN.contains(&b))
                    && !after.is_some_and(|a| matches!(a, "count" | "limit" | "budget" | "usage"))
            }
            "phrase" | "words" => before.is_some_and(|b| matches!(b, "seed" | "recovery")),
            _ => false,
        }
    })
}

/// The patterns of the text checks, by kind. Case-insensitive; `\b` is an ASCII word boundary.
static PATTERNS: LazyLock<Vec<(FindingKind, Regex)>> = LazyLock::new(|| {
    use FindingKind::{Concealment, CrossTool, InstructionTag, Override, SensitivePath};
    let sources: &[(FindingKind, &str)] = &[
        (
            InstructionTag,
            r"</?\s*(important|system|instructions?|secret|hidden|admin|assistant|critical|urgent|mandatory|override|directive|sys|system[_ -]?prompt|ai[_ -]?instructions?|tool[_ -]?instructions?|note[_ -]?to[_ -]?(ai|assistant|llm|model))\s*>|\[/?INST\]|<<\s*/?SYS\s*>>|<\|\s*(im_start|im_end|system|endoftext)\s*\|>|<!--",
        ),
        (
            Override,
            r"\b(ignore|disregard|forget|override|bypass)\b[^.]{0,30}\b(previous|prior|above|earlier|preceding|all|any|other|your|existing|original|system)\b[^.]{0,20}\b(instructions?|rules|directions|guidelines|prompts?|constraints|guardrails|polic(y|ies))\b|\byou are now\b|\bfrom now on\b|\b(takes?|has|have) (precedence|priority) over (the |any |all )?(user|system|previous|prior|other|your|earlier)\b|\b(very\s+){2,}important\b|\b(all|your) data will be lost\b|\bthe (system|application|app) (will )?crash(es)?\b",
        ),
        (
            Concealment,
            r"\b(do not|don'?t|never|must not|should not|shouldn'?t|without)\s+(ever\s+)?(tell|telling|mention|mentioning|inform|informing|notify|notifying|alert|alerting|reveal|revealing|disclose|disclosing|let)\b[^.]{0,40}\b(user|human|anyone)\b|\b(do not|don'?t|never)\s+(mention|tell|reveal|disclose)\s+(that|this|it|anything|any of)\b|\b(hide|hidden|conceal|keep)\b[^.]{0,50}\bfrom the (user|human)\b|\bthe (user|human) (must|should|need|needs to) not (know|see|notice|be told)\b|\b(upset|scare|alarm|worry) the (user|human)\b|\bsecretly\b|\bsilently (send|forward|copy|read|include|add|call|upload|exfiltrate)\b",
        ),
        (
            CrossTool,
            concat!(
                // Before this tool: read or move data.
                r"\bbefore (using|calling|invoking|running|executing|you use|you call)\s+(this|the|any)\b[^.]{0,20}\b(tool|function)\b[^.]{0,30}\b(read|cat|open|send|pass|include|upload|fetch|copy|forward|email|post)\b",
                r"|\bbefore (answering|responding|replying|you answer|you respond)\b[^.]{0,30}\b(read|call|fetch|send|include|run)\b",
                // Another tool's behaviour (shadowing).
                r"|\bside effects? on\b[^.]{0,40}\btools?\b|\balso present\b|\bmcp_tool_\w+|\(mcp_\w+\)",
                r"|\b(when|whenever|once|after)\s+(the\s+)?`?\w+_\w+`?(\(\))?\s+(tool\s+)?(is|gets|has been)\s+(invoked|called|used|run|executed)\b",
                r"|\b(when|whenever|once)\s+(the\s+)?`?\w+_\w+`?\s+tool\s+is\s+(available|present)\b",
                r"|\b(other|another|any other)\s+tools?\b[^.]{0,30}\b(must|should|need to|has to|have to)\b",
                // Redirecting what another tool sends.
                r"|\b(all|every|always)\b[^.]{0,60}\bto\s+<?[\w.+-]+@[\w-]+\.\w+",
                r"|\b(bcc|cc)\s+(a copy\s+)?(to\s+)?<?[\w.+-]+@[\w-]+\.\w+",
                r"|\bchange the (recipient|destination|address|phone number|number|account|iban)\b",
                r"|\b(recipient|destination|number)\b[^.]{0,20}\bto\s+\+\d[\d -]{6,}",
                // What was read, or the conversation, into a parameter.
                r"|\b(pass|send|include|put|append|add)\s+(its|their)\s+(full\s+|entire\s+|whole\s+)?contents?\b",
                r"|\b(result|output|response)s? of (the |a |any )?(previous|earlier|prior|last)\b",
                r"|\b(previous|earlier|prior)\s+`?\w+_\w+`?\s+call\b|\bif you previously called\b",
                r"|\b(full|entire|complete) (list|history) of (the )?(last|previous|recent|prior)? ?(messages|chats|conversations?)\b",
                // Preference manipulation and line jumping.
                r"|\b(always|only)\s+(use|prefer|choose|call|pick)\s+this\s+tool\b",
                r"|\b(instead of|rather than|in place of)\s+(using\s+|calling\s+)?(any\s+)?(other|the other|another)\s+tools?\b",
                r"|\b(do not|don'?t|never)\s+use\s+(any\s+)?(other|another)\s+tools?\b",
                r"|\b(whenever|every time|each time|any time)\s+you\s+(run|execute|send|write|make|invoke|call|use)\s+(a|an|any|the|other)\s+(shell|command|commands|tools?|emails?|messages?|requests?|code|quer(y|ies)|transactions?|payments?)\b",
                r"|\b(all|every|each|any)\s+(shell\s+)?commands?\b[^.]{0,30}\b(must|should)\s+be\s+(prefixed|preceded|followed|prepended)\b",
                r"|\b(prefix|prepend)\b[^.]{0,20}\b(every|all|each|any)\s+(shell\s+)?commands?\b",
            ),
        ),
        (
            SensitivePath,
            r"~/\.ssh|\.ssh/|\bid_(rsa|dsa|ecdsa|ed25519)\b|\bmcp\.json\b|claude_desktop_config\.json|\.cursor/|~/\.aws|\.aws/credentials|\.git-credentials|\.netrc\b|\.npmrc\b|\.pypirc\b|/etc/(passwd|shadow|sudoers)\b|\.kube/config|\.docker/config\.json|\.gnupg\b|\bwallet\.dat\b|\.(bash|zsh)_history\b|\bauthorized_keys\b|~/\.env\b|\.config/gcloud\b",
        ),
    ];
    sources
        .iter()
        .map(|(kind, source)| {
            let pattern = format!("(?i){}", source.replace(r"\b", r"(?-u:\b)"));
            // A pattern that does not compile is this file's bug: the unit tests compile every one.
            (*kind, Regex::new(&pattern).unwrap_or_else(|error| panic!("scan pattern for {kind}: {error}")))
        })
        .collect()
});

#[cfg(test)]
mod tests;
