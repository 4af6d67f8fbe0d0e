//! Conditions: `PATH OP VALUE` over a call's screened arguments or its caller's verified identity, e.g.
//! `amount > 10000`, `path matches "**/.ssh/**"` or `not (identity.groups contains "payments")`.
//!
//! - `PATH` is an argument name followed by `.field` and `[index]` steps (`address.zip`, `items[0].sku`),
//!   or `identity.` and a claim of the caller's [`Identity`]: `identity.sub`, `identity.iss`, or a claim the
//!   host kept (`identity.groups`, `identity.scope`). `identity` is therefore not an argument name here.
//! - `OP` is one of `==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `matches` (a glob on a string, `/` is a
//!   separator), `starts_with` (a prefix of a string) and `contains` (a list holds an item equal to the
//!   value).
//! - `VALUE` is a JSON literal: a number, a `"string"`, `true` or `false`, or for `in` a non-empty list of
//!   scalars of one type. Its type is the type the argument must have (for `contains`, its items').
//! - `not (CONDITION)` negates a condition (nesting is allowed).
//!
//! A condition is typed: `amount > 10000` holds for the number `20000` and not for `5`. An argument that is
//! missing, or whose type is not the literal's, makes the condition *hold* (fail closed): a deny rule then
//! denies and an escalation rule escalates, so a model cannot slip past a rule by leaving an argument out or
//! sending `"20000"` as a string. Strings are matched as sent, without path normalisation.
//!
//! The same holds for identity: a call with **no verified identity** (a gateway's static bearer token, a
//! host that names none), or whose identity lacks the claim, or has it with another type, makes an identity
//! condition hold. `not` does not undo that: a condition that cannot be decided stays undecided through any
//! number of `not`s, and the rule applies. So `[[tools.transfer.when]] if = 'not (identity.groups contains
//! "payments")' deny = "payments team only"` refuses everyone who cannot be shown to be in the group.
//!
//! How `matches` reads a path (each spelling has a test, `path_spellings_match_as_documented`):
//!
//! - `/` separates components and `*` never crosses one; `**/` is any number of components, none included.
//!   So a rule on a component (`**/.ssh/**`) holds however the path around it is spelled: repeated slashes
//!   (`/home//me/.ssh/id`), dot segments (`/home/me/./.ssh/id`, `/tmp/../home/me/.ssh/id`), relative or
//!   `~/` paths. A rule anchored at a prefix (`/home/me/**`) is not: `/tmp/../home/me/x` does not start
//!   with `/home/me/`, so deny what a path *contains* rather than allow what it starts with.
//! - Matching is **case-sensitive**, byte for byte: `/home/me/.SSH/id` does not match `**/.ssh/**`. Where the
//!   tool's file system ignores case (macOS, Windows), spell the glob with classes: `**/.[sS][sS][hH]/**`.
//! - A **backslash** in the argument is an ordinary character, not a separator: `C:\Users\me\.ssh\id` is one
//!   component and does not match `**/.ssh/**`; a rule for a Windows tool matches the backslashes itself
//!   (the glob `**\\.ssh\\**`, where `\\` is one literal backslash; in the condition's JSON string literal
//!   each of those is doubled again: `path matches "**\\\\.ssh\\\\**"`) or denies both spellings.
//!   In the glob, a backslash escapes the next character (`\*` is a literal `*`).

use std::cmp::Ordering;
use std::fmt;

use globset::{GlobBuilder, GlobMatcher};
use serde_json::{Number, Value};

use crate::identity::Identity;
use crate::tool::Arguments;

/// A parsed condition.
#[derive(Debug, Clone)]
pub struct Condition {
    source: String,
    /// How many `not (…)` wrap the test.
    negations: usize,
    subject: Subject,
    path: Vec<Step>,
    test: Test,
}

/// What a condition's path starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    Arguments,
    Identity,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Index(usize),
}

#[derive(Debug, Clone)]
enum Test {
    Equal(Scalar),
    NotEqual(Scalar),
    Compare(Ordering, bool, Number),
    In(Vec<Scalar>),
    Matches(GlobMatcher),
    StartsWith(String),
    Contains(Scalar),
}

#[derive(Debug, Clone, PartialEq)]
enum Scalar {
    Bool(bool),
    Number(Number),
    String(String),
}

/// A condition that did not parse: what is wrong and where, as a character offset into the condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionError {
    /// Characters before the offending token.
    pub offset: usize,
    /// What is wrong, lower-case.
    pub message: String,
}

impl fmt::Display for ConditionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConditionError {}

/// Whether a condition holds for one call's arguments (and caller).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Evaluation {
    /// The argument has the literal's type and the test holds.
    Holds,
    /// The argument has the literal's type and the test does not hold.
    DoesNotHold,
    /// The argument (or identity claim) is missing or of another type, or the call has no identity:
    /// treated as holding. The text says why.
    FailedClosed(String),
}

impl Evaluation {
    /// Whether the rule applies: the test held, or it could not be decided.
    pub fn applies(&self) -> bool {
        !matches!(self, Evaluation::DoesNotHold)
    }
}

const OPERATORS: &str = "`==`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `matches`, `starts_with`, `contains`";

impl Condition {
    /// Parses `PATH OP VALUE`, or `not (CONDITION)`.
    pub fn parse(source: &str) -> Result<Condition, ConditionError> {
        let mut cursor = Cursor { text: source, at: 0 };
        cursor.skip_space();
        let mut negations = 0;
        while cursor.negation() {
            negations += 1;
            cursor.skip_space();
        }
        let mut path = cursor.path()?;
        let subject = match path.first() {
            Some(Step::Key(root)) if root == "identity" => {
                if path.len() < 2 {
                    return Err(ConditionError {
                        offset: cursor.offset(cursor.at),
                        message: "expected a claim after `identity`, e.g. `identity.sub` or `identity.groups`"
                            .to_owned(),
                    });
                }
                path.remove(0);
                Subject::Identity
            }
            _ => Subject::Arguments,
        };
        cursor.skip_space();
        let op_at = cursor.at;
        let op = cursor.operator().ok_or_else(|| ConditionError {
            offset: cursor.offset(op_at),
            message: format!("expected an operator after the argument path, one of {OPERATORS}"),
        })?;
        cursor.skip_space();
        let value_at = cursor.at;
        let rest = &source[value_at..];
        if rest.trim().is_empty() {
            return Err(ConditionError {
                offset: cursor.offset(value_at),
                message: format!("expected a value after `{op}`"),
            });
        }
        let invalid = |err: serde_json::Error| ConditionError {
            offset: cursor.offset(value_at) + json_error_offset(rest, &err),
            message: format!(
                "invalid value: {}; write a JSON literal such as `10000`, `\"text\"` or `true`",
                json_error_text(&err)
            ),
        };
        // Inside `not (…)` the literal is followed by its closing parentheses: take them off the end first.
        let mut literal = rest;
        for _ in 0..negations {
            let trimmed = literal.trim_end();
            let Some(inner) = trimmed.strip_suffix(')') else {
                return Err(ConditionError {
                    offset: cursor.offset(value_at) + trimmed.chars().count(),
                    message: "expected `)` to close `not (`".to_owned(),
                });
            };
            literal = inner;
        }
        if literal.trim().is_empty() {
            return Err(ConditionError {
                offset: cursor.offset(value_at),
                message: format!("expected a value after `{op}`"),
            });
        }
        let value: Value = serde_json::from_str(literal).map_err(invalid)?;
        let at = cursor.offset(value_at);
        let fail = |message: String| ConditionError { offset: at, message };
        let test = match op {
            "==" => {
                Test::Equal(scalar(&value).ok_or_else(|| fail(format!("`{op}` needs a number, string or boolean")))?)
            }
            "!=" => {
                Test::NotEqual(scalar(&value).ok_or_else(|| fail(format!("`{op}` needs a number, string or boolean")))?)
            }
            "<" | "<=" | ">" | ">=" => {
                let Value::Number(number) = value else {
                    return Err(fail(format!("`{op}` compares numbers; give a number such as `10000`")));
                };
                let (ordering, or_equal) = match op {
                    "<" => (Ordering::Less, false),
                    "<=" => (Ordering::Less, true),
                    ">" => (Ordering::Greater, false),
                    _ => (Ordering::Greater, true),
                };
                Test::Compare(ordering, or_equal, number)
            }
            "in" => {
                let Value::Array(items) = value else {
                    return Err(fail("`in` needs a list such as `[\"usd\", \"eur\"]`".to_owned()));
                };
                if items.is_empty() {
                    return Err(fail("`in` needs a non-empty list".to_owned()));
                }
                let scalars =
                    items.iter().map(scalar).collect::<Option<Vec<_>>>().ok_or_else(|| {
                        fail("the items of an `in` list must be numbers, strings or booleans".to_owned())
                    })?;
                if scalars.iter().any(|s| s.kind() != scalars[0].kind()) {
                    return Err(fail("the items of an `in` list must all have one type".to_owned()));
                }
                Test::In(scalars)
            }
            "matches" => {
                let Value::String(pattern) = value else {
                    return Err(fail("`matches` needs a glob string such as `\"**/.ssh/**\"`".to_owned()));
                };
                let glob = GlobBuilder::new(&pattern)
                    .literal_separator(true)
                    .build()
                    .map_err(|err| fail(format!("invalid glob `{pattern}`: {}", err.kind())))?;
                Test::Matches(glob.compile_matcher())
            }
            "contains" => Test::Contains(scalar(&value).ok_or_else(|| {
                fail("`contains` needs the item to look for: a number, string or boolean".to_owned())
            })?),
            _ => {
                let Value::String(prefix) = value else {
                    return Err(fail("`starts_with` needs a string such as `\"/etc/\"`".to_owned()));
                };
                Test::StartsWith(prefix)
            }
        };
        Ok(Condition { source: source.trim().to_owned(), negations, subject, path, test })
    }

    /// Whether the condition tests the caller's identity rather than the call's arguments: such a
    /// condition is decided by who calls alone, so a deny rule on it can hide the tool from that caller.
    pub fn is_about_identity(&self) -> bool {
        self.subject == Subject::Identity
    }

    /// The condition as written (trimmed).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates the condition against a call's screened arguments, with no identity (an identity
    /// condition fails closed).
    pub fn evaluate(&self, arguments: &Arguments) -> Evaluation {
        self.evaluate_for(arguments, None)
    }

    /// Evaluates the condition against a call's screened arguments and its caller's verified identity.
    pub fn evaluate_for(&self, arguments: &Arguments, identity: Option<&Identity>) -> Evaluation {
        let evaluation = self.evaluate_test(arguments, identity);
        if self.negations.is_multiple_of(2) {
            return evaluation;
        }
        match evaluation {
            Evaluation::Holds => Evaluation::DoesNotHold,
            Evaluation::DoesNotHold => Evaluation::Holds,
            // Undecided stays undecided: the rule applies however many `not`s wrap it.
            failed @ Evaluation::FailedClosed(_) => failed,
        }
    }

    fn evaluate_test(&self, arguments: &Arguments, identity: Option<&Identity>) -> Evaluation {
        let claim;
        let value = match self.subject {
            Subject::Arguments => match self.lookup(arguments) {
                Some(value) => value,
                None => return Evaluation::FailedClosed(format!("{} is missing", self.path_text())),
            },
            Subject::Identity => {
                let Some(identity) = identity else {
                    return Evaluation::FailedClosed("the call carries no verified identity".to_owned());
                };
                // The parser makes an identity path start with a claim's name.
                let Some((Step::Key(name), rest)) = self.path.split_first() else {
                    return Evaluation::FailedClosed(format!("{} is missing", self.path_text()));
                };
                claim = identity.claim(name);
                match claim.as_ref().and_then(|value| descend(value, rest)) {
                    Some(value) => value,
                    None => {
                        return Evaluation::FailedClosed(format!("{} is missing", self.path_text()));
                    }
                }
            }
        };
        let decided = match &self.test {
            Test::Equal(expected) => typed(value, expected.kind()).map(|actual| actual.same(expected)),
            Test::NotEqual(expected) => typed(value, expected.kind()).map(|actual| !actual.same(expected)),
            Test::Compare(ordering, or_equal, bound) => match value {
                Value::Number(actual) => compare_numbers(actual, bound)
                    .map(|found| found == *ordering || (*or_equal && found == Ordering::Equal)),
                _ => None,
            },
            Test::In(items) => typed(value, items[0].kind()).map(|actual| items.iter().any(|item| actual.same(item))),
            Test::Matches(glob) => value.as_str().map(|text| glob.is_match(text)),
            Test::StartsWith(prefix) => value.as_str().map(|text| text.starts_with(prefix.as_str())),
            Test::Contains(item) => match value.as_array() {
                // An item of another type is undecided, like a scalar of another type: `["prod"]` nested in
                // a list, or groups given as objects, cannot slip past `tags contains "prod"`.
                Some(items) => match contains(items, item) {
                    Ok(found) => Some(found),
                    Err(odd) => {
                        return Evaluation::FailedClosed(format!(
                            "{} holds {}, not only {}",
                            self.path_text(),
                            kind_of(odd),
                            item.kind()
                        ));
                    }
                },
                None => None,
            },
        };
        match decided {
            Some(true) => Evaluation::Holds,
            Some(false) => Evaluation::DoesNotHold,
            None => Evaluation::FailedClosed(format!(
                "{} is {}, not {}",
                self.path_text(),
                kind_of(value),
                self.expected_kind()
            )),
        }
    }

    fn lookup<'a>(&self, arguments: &'a Arguments) -> Option<&'a Value> {
        let (Step::Key(first), rest) = self.path.split_first()? else { return None };
        descend(arguments.get(first)?, rest)
    }

    /// The path as written, named for a message: ``argument `a.b` `` or ``identity claim `groups` ``.
    fn path_text(&self) -> String {
        match self.subject {
            Subject::Arguments => format!("argument `{}`", self.steps_text()),
            Subject::Identity => format!("identity claim `{}`", self.steps_text()),
        }
    }

    fn steps_text(&self) -> String {
        let mut text = String::new();
        for step in &self.path {
            match step {
                Step::Key(key) if text.is_empty() => text.push_str(key),
                Step::Key(key) => {
                    text.push('.');
                    text.push_str(key);
                }
                Step::Index(index) => text.push_str(&format!("[{index}]")),
            }
        }
        text
    }

    fn expected_kind(&self) -> &'static str {
        match &self.test {
            Test::Equal(s) | Test::NotEqual(s) => s.kind(),
            Test::In(items) => items[0].kind(),
            Test::Compare(..) => "a number",
            Test::Matches(_) | Test::StartsWith(_) => "a string",
            Test::Contains(_) => "a list",
        }
    }
}

/// Whether `items` holds `item`: `Err` with an item of another type when none equals it.
fn contains<'a>(items: &'a [Value], item: &Scalar) -> Result<bool, &'a Value> {
    let mut odd = None;
    for actual in items {
        match typed(actual, item.kind()) {
            Some(actual) if actual.same(item) => return Ok(true),
            Some(_) => {}
            None => odd = odd.or(Some(actual)),
        }
    }
    odd.map_or(Ok(false), Err)
}

/// The value at `steps` below `value`; a `null` is as good as missing.
fn descend<'a>(mut value: &'a Value, steps: &[Step]) -> Option<&'a Value> {
    for step in steps {
        value = match step {
            Step::Key(key) => value.as_object()?.get(key)?,
            Step::Index(index) => value.as_array()?.get(*index)?,
        };
    }
    (!value.is_null()).then_some(value)
}

/// Two conditions are the same if they are written the same.
impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for Condition {}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Scalar {
    fn kind(&self) -> &'static str {
        match self {
            Scalar::Bool(_) => "a boolean",
            Scalar::Number(_) => "a number",
            Scalar::String(_) => "a string",
        }
    }

    fn same(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Number(a), Scalar::Number(b)) => compare_numbers(a, b) == Some(Ordering::Equal),
            (a, b) => a == b,
        }
    }
}

fn scalar(value: &Value) -> Option<Scalar> {
    match value {
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) => Some(Scalar::Number(n.clone())),
        Value::String(s) => Some(Scalar::String(s.clone())),
        _ => None,
    }
}

/// The argument as a scalar of the expected kind, or `None` (mistyped).
fn typed(value: &Value, kind: &'static str) -> Option<Scalar> {
    scalar(value).filter(|actual| actual.kind() == kind)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Integers compare exactly; anything else as `f64`. `None` for a NaN, which JSON cannot carry.
fn compare_numbers(a: &Number, b: &Number) -> Option<Ordering> {
    let exact = |n: &Number| n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
    match (exact(a), exact(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// serde_json's message without its position (the caller reports the position itself).
fn json_error_text(err: &serde_json::Error) -> String {
    let text = err.to_string();
    match text.rfind(" at line ") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

/// The character offset inside `text` that a serde_json error points at.
fn json_error_offset(text: &str, err: &serde_json::Error) -> usize {
    let mut line = 1;
    for (offset, c) in text.chars().enumerate() {
        if line == err.line() {
            return offset + err.column().saturating_sub(1);
        }
        if c == '\n' {
            line += 1;
        }
    }
    text.chars().count()
}

struct Cursor<'a> {
    text: &'a str,
    /// Byte position.
    at: usize,
}

impl Cursor<'_> {
    fn offset(&self, byte: usize) -> usize {
        self.text[..byte].chars().count()
    }

    fn rest(&self) -> &str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn ident(&mut self) -> Option<String> {
        let rest = self.rest();
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            let ok = if i == 0 {
                c.is_ascii_alphabetic() || c == '_'
            } else {
                c.is_ascii_alphanumeric() || c == '_' || c == '-'
            };
            if !ok {
                break;
            }
            end = i + c.len_utf8();
        }
        let ident = rest[..end].to_owned();
        self.at += end;
        (end > 0).then_some(ident)
    }

    /// Consumes `not (` if the text continues with it.
    fn negation(&mut self) -> bool {
        let Some(after) = self.rest().strip_prefix("not") else { return false };
        let trimmed = after.trim_start();
        if !trimmed.starts_with('(') {
            return false;
        }
        self.at += 3 + (after.len() - trimmed.len()) + 1;
        true
    }

    fn path(&mut self) -> Result<Vec<Step>, ConditionError> {
        let start = self.at;
        let Some(first) = self.ident() else {
            return Err(ConditionError {
                offset: self.offset(start),
                message: "expected an argument name, e.g. `amount` or `address.zip`".to_owned(),
            });
        };
        let mut path = vec![Step::Key(first)];
        loop {
            if self.rest().starts_with('.') {
                self.at += 1;
                let at = self.at;
                let key = self.ident().ok_or_else(|| ConditionError {
                    offset: self.offset(at),
                    message: "expected a field name after `.`".to_owned(),
                })?;
                path.push(Step::Key(key));
            } else if self.rest().starts_with('[') {
                let at = self.at;
                let close = self.rest().find(']');
                let index = close.and_then(|close| self.rest()[1..close].trim().parse::<usize>().ok());
                let (Some(close), Some(index)) = (close, index) else {
                    return Err(ConditionError {
                        offset: self.offset(at),
                        message: "expected a list index such as `[0]`".to_owned(),
                    });
                };
                self.at += close + 1;
                path.push(Step::Index(index));
            } else {
                return Ok(path);
            }
        }
    }

    fn operator(&mut self) -> Option<&'static str> {
        const SYMBOLS: [&str; 6] = ["==", "!=", "<=", ">=", "<", ">"];
        const WORDS: [&str; 4] = ["in", "matches", "starts_with", "contains"];
        let rest = self.rest();
        let op = SYMBOLS.into_iter().find(|op| rest.starts_with(op)).or_else(|| {
            WORDS.into_iter().find(|word| {
                rest.strip_prefix(word)
                    .is_some_and(|after| after.is_empty() || after.starts_with([' ', '\t', '\n', '[', '"']))
            })
        })?;
        self.at += op.len();
        Some(op)
    }
}

#[cfg(test)]
mod tests;
