//! Result masking: secrets and personal data are replaced before a tool's result reaches the model.
//!
//! A [`Masker`] holds the [`MaskConfig`] (how each [`MaskKind`] is written back); the [`MaskSet`] (which kinds
//! are looked for) comes with each call, from the tool's `mask = "…"` attribute joined with the policy's.
//! Text is scanned once by a multi-pattern regex, and every candidate is verified (Luhn, IBAN mod-97, SSN
//! ranges, JWT header, the context around numbers) so that version strings, order numbers and timestamps
//! are left alone. JSON results are masked leaf by leaf and keep their shape.
//!
//! ```
//! use agent_airlock::{mask::{MaskConfig, MaskKind, MaskSet, MaskStrategy, Masker}};
//! use serde_json::json;
//!
//! let masker = Masker::new(MaskConfig::new(MaskStrategy::TypeTag));
//! let text = "mail jane@example.com, key AKIAIOSFODNN7QK4RW2Z, build 1.2.3.4";
//! assert_eq!(
//!     masker.mask_text(text, MaskSet::SECRETS | MaskSet::PII),
//!     "mail [EMAIL], key [AWS_ACCESS_KEY], build 1.2.3.4"
//! );
//!
//! let mut result = json!({"customer": {"email": "jane@example.com", "password": "hunter2"}, "order": 123456789});
//! let report = masker.mask_value(&mut result, MaskSet::SECRETS | MaskSet::PII);
//! assert_eq!(result, json!({"customer": {"email": "[EMAIL]", "password": "[SECRET_VALUE]"}, "order": 123456789}));
//! assert_eq!(report.count(MaskKind::Email), 1);
//! ```

mod detect;
mod json;
mod providers;
mod report;
mod screen;
mod strategy;
mod validate;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use serde_json::{Map, Value};

use self::detect::{Finding, Scanner};
use self::json::KeyHint;
pub use self::report::MaskReport;
pub use self::strategy::{DEFAULT_MAX_TEXT_BYTES, FULL_MASK, HASH_HEX_LEN, MaskConfig, MaskStrategy, too_large};
pub use agent_airlock_grammar::{MASK_SET_NAMES, MaskKind, MaskSet, MaskSetParseError};

/// Texts shorter than this cannot hold a finding (the shortest is an e-mail such as `a@b.co`).
const MIN_FINDING_LEN: usize = 6;

/// Masks text and JSON values. Build one per deployment and share it: cloning is cheap, and the compiled
/// patterns are shared by every masker in the process.
#[derive(Clone, Debug, Default)]
pub struct Masker {
    config: Arc<MaskConfig>,
}

/// One value the masker would replace: its kind and byte range in the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detection {
    /// What the value is.
    pub kind: MaskKind,
    /// Where it is, in bytes.
    pub range: Range<usize>,
}

impl Masker {
    /// A masker writing findings back as `config` says.
    pub fn new(config: MaskConfig) -> Masker {
        Masker { config: Arc::new(config) }
    }

    /// How findings are written back.
    pub fn config(&self) -> &MaskConfig {
        &self.config
    }

    /// `text` with every finding of a kind in `set` replaced; borrowed when nothing was found.
    pub fn mask_text<'a>(&self, text: &'a str, set: MaskSet) -> Cow<'a, str> {
        self.mask_text_with_report(text, set).0
    }

    /// [`Masker::mask_text`], and what was masked.
    pub fn mask_text_with_report<'a>(&self, text: &'a str, set: MaskSet) -> (Cow<'a, str>, MaskReport) {
        let mut report = MaskReport::new();
        let masked = match self.mask_str(text, set, &mut report) {
            Some(masked) => Cow::Owned(masked),
            None => Cow::Borrowed(text),
        };
        (masked, report)
    }

    /// The findings in `text` of a kind in `set`, in order, without masking anything: exactly what
    /// [`Masker::mask_text`] replaces.
    pub fn detect(&self, text: &str, set: MaskSet) -> Vec<Detection> {
        if set.is_empty() {
            return Vec::new();
        }
        let Some((scanner, only)) = detect::scanner(set) else { return Vec::new() };
        if text.len() > self.config.max_text_bytes() {
            // Masking replaces it whole ([`MaskConfig::with_max_text_bytes`]).
            return vec![Detection { kind: MaskKind::SecretValue, range: 0..text.len() }];
        }
        self.findings(&scanner, only, text)
            .into_iter()
            .map(|finding| Detection { kind: finding.kind, range: finding.start..finding.end })
            .collect()
    }

    /// The findings in `text`, in order, never overlapping, in `text`'s offsets: the blocks first masked
    /// ([`Masker::stage_blocks`]) and what the scan of the staged text finds, each mapped back; a block inside
    /// a later finding is part of it.
    fn findings(&self, scanner: &Scanner, only: MaskSet, text: &str) -> Vec<Finding> {
        if text.len() < MIN_FINDING_LEN || detect::cannot_hold_a_finding(text) {
            return Vec::new();
        }
        let only = without_absent_keys(only, text);
        let Some(staged) = self.stage_blocks(only, text, &mut MaskReport::new(), &mut false) else {
            return all_findings(scanner, only, text);
        };
        let mut found = Vec::new();
        let mut blocks = staged.blocks.iter().peekable();
        for mut finding in all_findings(scanner, only, &staged.text) {
            let (start, end) = (staged.original(finding.start, false), staged.original(finding.end, true));
            while let Some(block) = blocks.next_if(|block| block.original.start < end) {
                if block.original.end <= start {
                    found.push(block.finding);
                }
            }
            finding.start = start;
            finding.end = end;
            found.push(finding);
        }
        found.extend(blocks.map(|block| block.finding));
        merge_overlapping(found)
    }

    /// Masks the private-key blocks of `text` first, before anything else is looked for: a block may hold
    /// line breaks and quotes, which decide where other matches end (`passwd: "…-----BEGIN…\n…"…-----END…"`
    /// closes its quote inside the block), so the rest is looked for in the text with the blocks masked, the
    /// text a second masking would see. `None` when there is no block.
    fn stage_blocks(&self, only: MaskSet, text: &str, report: &mut MaskReport, partial: &mut bool) -> Option<Staged> {
        if !only.contains_kind(MaskKind::PrivateKey) {
            return None;
        }
        let (scanner, _) = detect::scanner(MaskSet::of(MaskKind::PrivateKey))?;
        let mut staged = Staged { text: String::new(), blocks: Vec::new() };
        let mut copied = 0;
        scanner.scan(text, MaskSet::of(MaskKind::PrivateKey), |finding| {
            staged.text.push_str(&text[copied..finding.start]);
            let start = staged.text.len();
            *partial |= matches!(self.config.strategy(finding.kind), MaskStrategy::Partial);
            self.render(text, finding, &mut staged.text);
            staged.blocks.push(Block {
                staged: start..staged.text.len(),
                original: finding.start..finding.end,
                finding,
            });
            copied = finding.end;
            report.record(finding.kind);
        });
        if staged.blocks.is_empty() {
            return None;
        }
        staged.text.push_str(&text[copied..]);
        Some(staged)
    }

    fn detect_with(&self, scanner: &Scanner, only: MaskSet, text: &str) -> Vec<Finding> {
        self.findings(scanner, only, text)
    }

    /// Masks `value` in place, leaf by leaf: strings are masked as text; an integer that is a payment card
    /// (or, under a key such as `phone`, `ssn`, `password`, a phone, SSN or secret) becomes the masking
    /// string, other numbers stay numbers. A string under a secret-naming key (`password`, `api_key`,
    /// `client_secret`, `access_token`, …) is masked whole, and so is the value of a name/value pair whose
    /// name names a secret (`{"name": "DB_PASSWORD", "value": "…"}`, `{"Key": "api_key", "Value": "…"}`) and the
    /// value member of an object under a secret's key (`{"db_password": {"sensitive": true, "value": "…"}}`).
    ///
    /// Object keys are masked as text too. A masked key that equals another key of its object gets the
    /// first free suffix `#2`, `#3`, … (`{"[EMAIL]": …, "[EMAIL]#2": …}`), so no member is dropped.
    ///
    /// ```
    /// use agent_airlock::{mask::{MaskSet, Masker}};
    /// use serde_json::json;
    ///
    /// let mut value = json!({
    ///     "users": {"jane@example.com": {"admin": true}, "john@example.com": {"admin": false}},
    ///     "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "token_count", "value": 12}],
    /// });
    /// Masker::default().mask_value(&mut value, MaskSet::SECRETS | MaskSet::PII);
    /// assert_eq!(value, json!({
    ///     "users": {"[EMAIL]": {"admin": true}, "[EMAIL]#2": {"admin": false}},
    ///     "env": [{"name": "DB_PASSWORD", "value": "[SECRET_VALUE]"}, {"name": "token_count", "value": 12}],
    /// }));
    /// ```
    pub fn mask_value(&self, value: &mut Value, set: MaskSet) -> MaskReport {
        let mut report = MaskReport::new();
        if set.is_empty() {
            return report;
        }
        let Some((scanner, only)) = detect::scanner(set) else {
            *value = Value::String(FULL_MASK.to_owned());
            return report;
        };
        let max = self.config.max_text_bytes();
        // A result that is one string, as most tools' are: masked as the one leaf it is (over the budget, refused
        // whole by `mask_leaf`), without the stack below.
        if let Value::String(text) = value {
            if let Some(masked) = self.mask_leaf(&scanner, only, text, KeyHint::None, &mut report) {
                *text = masked;
            }
            return report;
        }
        // The bytes of strings and keys read so far: the budget holds for the whole value, not per leaf, so a
        // result of many leaves each under it is not masked for longer than one text of its size would be.
        let mut read = 0usize;
        let mut over_budget = false;
        // An explicit stack: a deeply nested result must not overflow the thread's stack.
        let mut pending: Vec<(&mut Value, KeyHint)> = vec![(value, KeyHint::None)];
        let mut member_hints = json::MemberHints::default();
        while let Some((node, hint)) = pending.pop() {
            match node {
                Value::String(text) => {
                    read = read.saturating_add(text.len());
                    if read > max {
                        over_budget = true;
                        break;
                    }
                    if let Some(masked) = self.mask_leaf(&scanner, only, text, hint, &mut report) {
                        *text = masked;
                    }
                }
                Value::Number(number) => {
                    let hint = if hint == KeyHint::SecretMembers { KeyHint::Secret } else { hint };
                    let worth_a_look = hint != KeyHint::None || number.as_u64().is_some_and(|n| n >= 10u64.pow(12));
                    if worth_a_look && (hint == KeyHint::Secret || number.is_u64() || number.is_i64()) {
                        let rendered = number.to_string();
                        if let Some(masked) = self.mask_leaf(&scanner, only, &rendered, hint, &mut report) {
                            *node = Value::String(masked);
                        }
                    }
                }
                // The elements of `"phones": [...]` are phones too.
                Value::Array(items) => pending.extend(items.iter_mut().map(|item| (item, hint))),
                Value::Object(fields) => {
                    read = fields.keys().fold(read, |read, key| read.saturating_add(key.len()));
                    if read > max {
                        read = fields.values().fold(read, |read, field| read.saturating_add(text_bytes(field)));
                        over_budget = true;
                        break;
                    }
                    self.mask_keys(&scanner, only, fields, &mut report);
                    // `{"name": "DB_PASSWORD", "value": "…"}`: the name marks its sibling. An object under a secret's
                    // key holds the secret in its value member (Terraform's `"db_password": {"sensitive": true,
                    // "value": "…"}`).
                    let pair = if hint == KeyHint::Secret { KeyHint::Secret } else { json::pair_hint(fields) };
                    // A Kubernetes Secret's `data` and `stringData`: every member a secret, whatever its key.
                    let secret = json::is_kubernetes_secret(fields);
                    pending.extend(fields.iter_mut().map(|(key, field)| {
                        let hint = match member_hints.of_member(key) {
                            _ if hint == KeyHint::SecretMembers => KeyHint::Secret,
                            _ if secret && json::KUBERNETES_SECRET_MEMBERS.contains(&key.as_str()) => {
                                KeyHint::SecretMembers
                            }
                            KeyHint::None if pair != KeyHint::None && json::is_value_member(key) => pair,
                            hint => hint,
                        };
                        (field, hint)
                    }));
                }
                Value::Null | Value::Bool(_) => {}
            }
        }
        if over_budget {
            // Refused whole, as one text over the budget is: what was masked so far is dropped with the rest. Its
            // size as it came: what was read, and what was not.
            let size = pending.iter().fold(read, |size, (node, _)| size.saturating_add(text_bytes(node)));
            drop(pending);
            *value = Value::String(strategy::too_large(size, max));
        }
        report
    }

    /// Masks an object's keys as text (`{"jane@example.com": {…}}` leaks the address otherwise). A masked
    /// key stays a key of its own: when it equals a key the object already has (two addresses both become
    /// `[EMAIL]`), `#2`, `#3`, … is appended, the first free one in the object's order, so no member is
    /// lost and the order of members is kept. Hints are read from the masked keys, so masking twice
    /// changes nothing the second time.
    fn mask_keys(&self, scanner: &Scanner, only: MaskSet, fields: &mut Map<String, Value>, report: &mut MaskReport) {
        // Allocated only once a key is masked: most objects have none.
        let mut renamed: Vec<Option<String>> = Vec::new();
        for (index, key) in fields.keys().enumerate() {
            let masked = if detect::key_cannot_hold_a_finding(key) {
                None
            } else {
                self.mask_str_with(scanner, only, key, report)
            };
            if masked.is_some() && renamed.is_empty() {
                renamed.resize(index, None);
            }
            if masked.is_some() || !renamed.is_empty() {
                renamed.push(masked);
            }
        }
        if renamed.is_empty() {
            return;
        }
        let mut taken: HashSet<String> =
            fields.keys().zip(&renamed).filter(|(_, masked)| masked.is_none()).map(|(key, _)| key.clone()).collect();
        // The next suffix to try for each masked text, so that many keys masked alike cost linear time.
        let mut next_suffix: HashMap<String, u64> = HashMap::new();
        let old = std::mem::take(fields);
        for ((key, field), masked) in old.into_iter().zip(renamed) {
            let key = match masked {
                None => key,
                Some(masked) => {
                    let n = next_suffix.entry(masked.clone()).or_insert(1);
                    let mut unique = if *n == 1 { masked.clone() } else { format!("{masked}#{n}") };
                    while taken.contains(&unique) {
                        *n += 1;
                        unique = format!("{masked}#{n}");
                    }
                    *n += 1;
                    taken.insert(unique.clone());
                    unique
                }
            };
            fields.insert(key, field);
        }
    }

    fn mask_str(&self, text: &str, set: MaskSet, report: &mut MaskReport) -> Option<String> {
        if set.is_empty() || text.len() < MIN_FINDING_LEN {
            return None;
        }
        let Some((scanner, only)) = detect::scanner(set) else {
            // Fail closed: without patterns nothing can be shown safely.
            return Some(FULL_MASK.to_owned());
        };
        self.mask_str_with(&scanner, only, text, report)
    }

    /// `text` with every finding replaced: the private-key blocks first ([`Masker::stage_blocks`]), then one
    /// scan of the result. A verifier's verdict never depends on whether a neighbour is masked (see
    /// [`detect`]), so with replacements in brackets the result is a fixed point: masking it again finds
    /// nothing more. A [`MaskStrategy::Partial`] replacement keeps text of the value (`j***@example.com`),
    /// which may change what its neighbours match, so its result is masked again until nothing more is found;
    /// every extra pass replaces text no pass wrote, so there is at most one per byte of `text`.
    fn mask_str_with(&self, scanner: &Scanner, only: MaskSet, text: &str, report: &mut MaskReport) -> Option<String> {
        if text.len() > self.config.max_text_bytes() {
            // Refused whole, as a scan failing would be: never shown unmasked.
            return Some(strategy::too_large(text.len(), self.config.max_text_bytes()));
        }
        let (mut masked, mut partial) = self.mask_once(scanner, only, text, report)?;
        let mut passes = 1;
        while partial {
            let mut found = MaskReport::new();
            let Some((next, still_partial)) = self.mask_once(scanner, only, &masked, &mut found) else { break };
            if next == masked {
                // Only partial replacements that write themselves again (a block's BEGIN and END lines).
                break;
            }
            report.merge(&found);
            passes += 1;
            if passes > text.len() {
                // Unreachable by the argument above; should it ever be reached, fail closed.
                return Some(FULL_MASK.to_owned());
            }
            (masked, partial) = (next, still_partial);
        }
        Some(masked)
    }

    /// One masking of `text`, and whether a partial replacement was written; `None` when nothing was found.
    fn mask_once(
        &self,
        scanner: &Scanner,
        only: MaskSet,
        text: &str,
        report: &mut MaskReport,
    ) -> Option<(String, bool)> {
        if text.len() < MIN_FINDING_LEN || detect::cannot_hold_a_finding(text) {
            return None;
        }
        let mut partial = false;
        let only = without_absent_keys(only, text);
        let staged = self.stage_blocks(only, text, report, &mut partial).map(|staged| staged.text);
        let input = staged.as_deref().unwrap_or(text);
        let mut out: Option<String> = None;
        let mut copied = 0;
        for finding in all_findings(scanner, only, input) {
            let out = out.get_or_insert_with(|| String::with_capacity(input.len() + 16));
            out.push_str(&input[copied..finding.start]);
            partial |= matches!(self.config.strategy(finding.kind), MaskStrategy::Partial);
            self.render(input, finding, out);
            copied = finding.end;
            report.record(finding.kind);
        }
        let masked = match out {
            Some(mut out) => {
                out.push_str(&input[copied..]);
                out
            }
            None => staged?,
        };
        Some((masked, partial))
    }

    fn render(&self, text: &str, finding: Finding, out: &mut String) {
        let strategy = self.config.strategy(finding.kind);
        strategy::render(strategy, finding.kind, &text[finding.start..finding.end], finding.keep_prefix, out);
    }

    /// `text` masked whole as one finding of `kind`, recorded in `report`.
    fn masked_whole(&self, text: &str, kind: MaskKind, report: &mut MaskReport) -> String {
        let mut out = String::new();
        self.render(text, Finding { kind, start: 0, end: text.len(), keep_prefix: 0 }, &mut out);
        report.record(kind);
        out
    }

    /// Masks one JSON leaf under the hint its key gives.
    fn mask_leaf(
        &self,
        scanner: &Scanner,
        set: MaskSet,
        text: &str,
        hint: KeyHint,
        report: &mut MaskReport,
    ) -> Option<String> {
        if text.len() > self.config.max_text_bytes() {
            return Some(strategy::too_large(text.len(), self.config.max_text_bytes()));
        }
        let kind = match hint {
            KeyHint::None => return self.mask_str_with(scanner, set, text, report),
            // Docker's `"auth"`: Basic credentials when it is base64 of `user:password`, as text reads them.
            KeyHint::Basic => {
                let kind = MaskKind::BearerToken;
                if set.contains_kind(kind) && validate::is_basic_credentials(text.trim().as_bytes()) {
                    return Some(self.masked_whole(text, kind, report));
                }
                return self.mask_str_with(scanner, set, text, report);
            }
            KeyHint::Secret | KeyHint::SecretMembers => MaskKind::SecretValue,
            KeyHint::Phone => MaskKind::Phone,
            KeyHint::Ssn => MaskKind::UsSsn,
            KeyHint::Card => MaskKind::PaymentCard,
        };
        let trimmed = text.trim();
        if kind == MaskKind::SecretValue && set.contains_kind(kind) && !detect::is_mask_or_placeholder(trimmed) {
            // The whole value is the secret. If it is exactly one recognised key, that kind names it.
            let detections = self.detect_with(scanner, set, text);
            if let [one] = detections.as_slice()
                && (one.start, one.end) == (0, text.len())
                && one.kind.is_secret()
            {
                return self.mask_str_with(scanner, set, text, report);
            }
            return Some(self.masked_whole(text, kind, report));
        }
        if let Some(masked) = self.mask_str_with(scanner, set, text, report) {
            return Some(masked);
        }
        if set.contains_kind(kind) && labelled_value_is(kind, trimmed) {
            return Some(self.masked_whole(text, kind, report));
        }
        None
    }
}

/// The findings in `text`: the scanner's ([`settled_findings`]), then the provider secrets of gitleaks' rule set
/// ([`providers`]) that none of them overlaps, as [`MaskKind::SecretValue`]. A provider secret's rule reads
/// only its own match, and a tag (`[SECRET_VALUE]`) matches no rule, so masking the result again finds no
/// provider secret the first masking missed.
///
/// But a provider secret [glued](glued) to the text before or after it changes what its neighbours read: in
/// `6200 0000 0000 0005ghp_…` the card number ends in a letter and is no card, while in the masked
/// `6200 0000 0000 0005[SECRET_VALUE]` it ends at a `[` and is one (found by the masking fuzz property
/// `json_values_keep_their_shape`). Then the text with every finding replaced by its tag is scanned again, as a
/// second masking would, and what it finds is mapped back; at most [`MAX_GLUED_PASSES`] times, so that masking
/// stays linear on any text (each pass that finds anything covers text no pass covered before).
fn all_findings(scanner: &Scanner, only: MaskSet, text: &str) -> Vec<Finding> {
    let (mut found, mut glued) = findings_and_glued(scanner, only, text);
    let mut passes = 0;
    while glued && passes < MAX_GLUED_PASSES {
        passes += 1;
        let tagged = Staged::tagged(text, &found);
        let (more, more_glued) = findings_and_glued(scanner, only, &tagged.text);
        if more.is_empty() {
            break;
        }
        if !merge_rescan(&mut found, &tagged, more) {
            break;
        }
        glued = more_glued;
    }
    found
}

/// Most scans of a text with its findings tagged that provider secrets glued to their neighbours cause
/// ([`all_findings`]). One settles every case seen; a chain needing more is masked as far as these go.
const MAX_GLUED_PASSES: usize = 4;

/// Whether a provider secret found at `start..end` of `text` touches, on either side, a byte that a match of our
/// own patterns can end or begin with (a letter or digit, or `_ - . + = /`, which tokens, cards, phone numbers
/// and base64 hold): such a match may end right where the secret begins (or begin where it ends), and its verdict
/// read the secret's first (last) byte, where a tag has `[` (`]`). A blank, a quote or a bracket beside it leaves
/// nothing to change, and the common `"…"`-quoted or blank-separated secret costs no second scan.
fn glued(text: &[u8], start: usize, end: usize) -> bool {
    let touches = |byte: Option<&u8>| {
        byte.is_some_and(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+' | b'=' | b'/'))
    };
    touches(start.checked_sub(1).and_then(|at| text.get(at))) || touches(text.get(end))
}

/// [`all_findings`]' one pass: the scanner's findings and the provider secrets none overlaps, and whether a
/// provider secret was added [`glued`] to its neighbours.
fn findings_and_glued(scanner: &Scanner, only: MaskSet, text: &str) -> (Vec<Finding>, bool) {
    // The provider rules' keyword pass comes first: it also says whether the text names a labelled secret.
    let providers = if only.contains_kind(MaskKind::SecretValue) { providers::providers() } else { None };
    let Some(providers) = providers else { return (settled_findings(scanner, only, text, true), false) };
    let pass = providers.keyword_pass(text);
    let found = settled_findings(scanner, only, text, pass.names_a_secret);
    // Built only once a provider secret comes: without one the merge is `found` itself.
    let mut merged: Option<Vec<Finding>> = None;
    let mut native = found.iter().copied().peekable();
    let mut any_glued = false;
    providers.find_in(pass, text, &found, |secret| {
        let merged = merged.get_or_insert_with(|| Vec::with_capacity(found.len() + 1));
        while let Some(finding) = native.next_if(|f| f.start < secret.end) {
            merged.push(finding);
        }
        let overlaps = merged.last().is_some_and(|f: &Finding| f.end > secret.start)
            || native.peek().is_some_and(|f| f.start < secret.end);
        if !overlaps {
            any_glued |= glued(text.as_bytes(), secret.start, secret.end);
            merged.push(Finding { kind: MaskKind::SecretValue, start: secret.start, end: secret.end, keep_prefix: 0 });
        }
    });
    match merged {
        Some(mut merged) => {
            merged.extend(native);
            (merged, any_glued)
        }
        None => (found, false),
    }
}

/// `only` without private keys when `text` holds no `-----BEGIN`, which both their patterns start with: neither
/// the blocks are looked for nor the scan searches the whole block's group. Replacing findings with tags never
/// makes a `-----BEGIN`, so the set holds for the text's rescans and for the text with its blocks masked.
fn without_absent_keys(only: MaskSet, text: &str) -> MaskSet {
    if only.contains_kind(MaskKind::PrivateKey) && !screen::holds_a_begin_line(text) {
        screen::without(only, MaskKind::PrivateKey)
    } else {
        only
    }
}

/// The findings in `text` as masking the result again would leave them: one scan, and while a finding started
/// inside a refused candidate's reach ([`Scanner::scan`] says so), another scan of the text with every finding
/// so far replaced by its tag, whose findings are mapped back (one that covers a tag takes its place). The
/// verdict of every candidate is then taken on the text a second masking sees, so one masking is the fixed
/// point the slow reference reaches. The loop is rare (a refused match running into a finding) and ends: each
/// extra scan that finds anything covers text no earlier scan covered.
///
/// `names_a_secret` is `false` only when the text holds none of the words every labelled secret's name holds
/// ([`screen::first_scan`]).
fn settled_findings(scanner: &Scanner, only: MaskSet, text: &str, names_a_secret: bool) -> Vec<Finding> {
    settled_findings_by(scanner, only, text, names_a_secret, tag_may_let_a_match_through)
}

/// [`settled_findings`], with `stopped` saying whether a finding of the first scan may have stopped a match that
/// its tag lets through (the tests compare [`tag_may_let_a_match_through`] with "every finding may").
fn settled_findings_by(
    scanner: &Scanner,
    only: MaskSet,
    text: &str,
    names_a_secret: bool,
    stopped: fn(&str, &Finding, MaskSet) -> bool,
) -> Vec<Finding> {
    if !names_a_secret && screen::is_quiet(text) {
        return Vec::new();
    }
    // Without the kinds the text cannot hold: their groups of patterns are left out of the scan.
    let only = detect::narrow(only, text);
    let mut found = Vec::new();
    let mut settled = scanner.scan(text, screen::first_scan(only, names_a_secret), |finding| found.push(finding));
    // The scan's findings never overlap (a label's own scan stops where its finding starts); should they, the text
    // they cover is masked as one, never sliced out of order (which panicked: session 44's fuzz run).
    let overlapping = found.windows(2).any(|pair| pair[1].start < pair[0].end);
    debug_assert!(!overlapping, "overlapping findings {found:?}");
    if overlapping {
        found = merge_overlapping(found);
    }
    settled &= !found.iter().any(|finding| stopped(text, finding, only));
    while !settled && !found.is_empty() {
        let tagged = Staged::tagged(text, &found);
        let mut more = Vec::new();
        settled = scanner.scan(&tagged.text, only, |finding| more.push(finding));
        if more.is_empty() {
            break;
        }
        if !merge_rescan(&mut found, &tagged, more) {
            break;
        }
    }
    found
}

/// Merges into `found` the findings `more` of a scan of `tagged` (`found` replaced by tags), each mapped back to
/// the text's offsets. A later finding that starts where an earlier one does covers it: it goes first, and its
/// kind wins. `false` when the merge covers no more text than `found` did: only findings inside tags, nothing
/// more to mask (a tag is never a finding; should one be, the rescans stop).
fn merge_rescan(found: &mut Vec<Finding>, tagged: &Staged, more: Vec<Finding>) -> bool {
    let covered: usize = found.iter().map(|f| f.end - f.start).sum();
    let mut all: Vec<(Finding, bool)> = std::mem::take(found).into_iter().map(|f| (f, false)).collect();
    all.extend(more.into_iter().map(|f| {
        let (start, end) = (tagged.original(f.start, false), tagged.original(f.end, true));
        let keep_prefix = if end - start == f.end - f.start { f.keep_prefix } else { 0 };
        (Finding { start, end, keep_prefix, ..f }, true)
    }));
    all.sort_by_key(|&(f, new)| (f.start, !new));
    *found = merge_overlapping(all.into_iter().map(|(f, _)| f).collect());
    found.iter().map(|f| f.end - f.start).sum::<usize>() > covered
}

/// Whether `finding` may have stopped a match that its tag, one bracketed word (`[PHONE]`), lets through, so that
/// the tagged text must be scanned again (`+1 555-0100` in `db://u:.@+1 555-0100…:pass@host`: the blank ends the
/// URL's password in the text, `[PHONE]` does not). Three patterns can match a tag's `[` or `]`
/// (`detect::tests::only_urls_labelled_values_and_key_blocks_can_match_a_tags_brackets`): a whole private-key
/// block, whose body is any byte, so that no byte of a finding stops it (a block around a finding is a match in
/// the text itself, which the scan looked at: refused, its reach says so; found, it covers the finding), and:
///
/// - a URL's password (`scheme://user:password@host`; the user part holds no `[`), which ends at a blank, `/`,
///   `?`, `#`, a quote, `<` or `>` ([`ends_url_credentials`]). A match running through a tag holds, from the tag
///   back to its `://`, only password and user bytes, none of which ends it, and a tag holds none either; so the
///   first finding after that `://` holding such a byte has, in the text itself, no such byte between the `://`
///   and its start, and is the one that answers `true` (findings between it and the `://` hold none).
/// - a quoted labelled value (`password: "…"`), which may hold anything but its quote and a line break, and
///   escapes (`\"`). A finding holding its closing quote lies inside the match that quote ends, which the scan
///   looked at: a refused one reaches over the finding ([`detect::Scanner::scan`] reports it unsettled), a found
///   one covers it. A line break in a finding can stop the value with no match at all, as the blank stops the
///   URL; so can a backslash, which escapes the closing quote in the text and is gone in the tagged text
///   (`password: "api_key=\"`: the value `\` is found, then `"api_key=[SECRET_VALUE]"` is a quoted value).
///
/// A finding holding none of those bytes reads in the tagged text as it reads in the text: no rescan for it.
fn tag_may_let_a_match_through(text: &str, finding: &Finding, only: MaskSet) -> bool {
    let bytes = text.as_bytes();
    let held = &bytes[finding.start..finding.end];
    if only.contains_kind(MaskKind::SecretValue) && held.iter().any(|&b| matches!(b, b'\r' | b'\n' | b'\\')) {
        return true;
    }
    if only.contains_kind(MaskKind::ConnectionPassword) && held.iter().copied().any(ends_url_credentials) {
        let before = &bytes[..finding.start];
        return before
            .iter()
            .copied()
            .rposition(ends_url_credentials)
            .is_some_and(|at| before[..=at].ends_with(b"://"));
    }
    false
}

/// The bytes a URL's password cannot hold (`detect::PATTERNS`, the connection password's pattern); its user part
/// holds none of them either.
fn ends_url_credentials(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | 0x0B | 0x0C | b'/' | b'?' | b'#' | b'"' | b'\'' | b'<' | b'>')
}

/// The bytes of `value`'s strings and object keys together (what masking it reads).
fn text_bytes(value: &Value) -> usize {
    let mut total = 0usize;
    let mut pending = vec![value];
    while let Some(node) = pending.pop() {
        match node {
            Value::String(text) => total = total.saturating_add(text.len()),
            Value::Array(items) => pending.extend(items),
            Value::Object(fields) => {
                total = fields.keys().fold(total, |total, key| total.saturating_add(key.len()));
                pending.extend(fields.values());
            }
            Value::Null | Value::Bool(_) | Value::Number(_) => {}
        }
    }
    total
}

/// `found` (in order of start) with each finding that starts inside the one before merged into it. Two
/// findings of the staged text can map back onto one block (a match that runs into a block's rendering
/// and one that starts inside it, as the partial strategy renders a block): in `text`'s offsets they
/// overlap, and what is reported must not, so the later one widens the earlier, which masks no less.
fn merge_overlapping(found: Vec<Finding>) -> Vec<Finding> {
    let mut merged: Vec<Finding> = Vec::with_capacity(found.len());
    for finding in found {
        match merged.last_mut() {
            Some(last) if finding.start < last.end => last.end = last.end.max(finding.end),
            _ => merged.push(finding),
        }
    }
    merged
}

/// A text with its private-key blocks masked, and where each block was.
struct Staged {
    text: String,
    blocks: Vec<Block>,
}

struct Block {
    /// Where its replacement is in the staged text.
    staged: Range<usize>,
    /// Where it was in the original text.
    original: Range<usize>,
    finding: Finding,
}

impl Staged {
    /// `text` with each of `found` (in order, never overlapping) replaced by its kind's tag, as the slow
    /// reference masks it.
    fn tagged(text: &str, found: &[Finding]) -> Staged {
        let mut staged = Staged { text: String::with_capacity(text.len()), blocks: Vec::with_capacity(found.len()) };
        let mut copied = 0;
        for &finding in found {
            staged.text.push_str(&text[copied..finding.start]);
            let start = staged.text.len();
            staged.text.push_str(finding.kind.tag());
            staged.blocks.push(Block {
                staged: start..staged.text.len(),
                original: finding.start..finding.end,
                finding,
            });
            copied = finding.end;
        }
        staged.text.push_str(&text[copied..]);
        staged
    }

    /// The offset in the original text of `offset` in the staged text; an offset inside a block's
    /// replacement is its start, or its end if `end`.
    fn original(&self, offset: usize, end: bool) -> usize {
        let before = self.blocks.partition_point(|block| block.staged.end <= offset);
        if let Some(block) = self.blocks.get(before)
            && block.staged.start < offset
        {
            return if end { block.original.end } else { block.original.start };
        }
        match before.checked_sub(1).map(|last| &self.blocks[last]) {
            Some(block) => offset - block.staged.end + block.original.end,
            None => offset,
        }
    }
}

/// Whether `value`, found under a key naming `kind`, has that kind's shape (bare digits are accepted here
/// because the key says what they are).
fn labelled_value_is(kind: MaskKind, value: &str) -> bool {
    let bytes = value.as_bytes();
    let digits: Vec<u8> = bytes.iter().copied().filter(u8::is_ascii_digit).collect();
    let only = |allowed: &[u8]| bytes.iter().all(|b| b.is_ascii_digit() || allowed.contains(b));
    match kind {
        MaskKind::Phone => only(b" +().-") && (7..=15).contains(&digits.len()),
        MaskKind::UsSsn => only(b" -") && validate::ssn_digits_valid(&digits),
        MaskKind::PaymentCard => only(b" -") && (12..=19).contains(&digits.len()) && validate::luhn_valid(&digits),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
