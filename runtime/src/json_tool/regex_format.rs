//! `"format": "regex"` in linear time.
//!
//! Drafts 4, 6 and 7 assert `format` (`jsonschema` follows them: zod-to-json-schema, which the TypeScript MCP SDK
//! uses, writes draft 7), so a string a model sends where such a schema says `"format": "regex"` is checked as an
//! ECMA-262 pattern. The `jsonschema` crate's check (`jsonschema_regex::is_valid_ecma_regex`) is linear but for
//! group names: each name declared is compared with every name declared before it in an open alternative, and
//! each `\k<name>` with every name declared, so a pattern of `n` named groups costs `n²` comparisons (64 KB of
//! `(?<g1>a)(?<g2>a)…` took 208 ms in a debug build, 16 MiB would take hours). It also keeps a copy of the last
//! 16 patterns it checked, of any size, in each thread.
//!
//! A pattern with few names or references goes to that check as it is. Any other is checked in two parts whose
//! conjunction is the crate's answer: the names here, with hash sets and one pass, and the rest by the crate's
//! check on the pattern with every named group made a plain capturing group and every `\k<name>` a `.` (an atom
//! either way, so the rest of the grammar reads it alike). The pattern is read the way the crate reads it: an
//! escape is a backslash and the next character (what a longer escape goes on with cannot be a bracket, a paren
//! or a bar in a valid pattern), a class runs to its first unescaped `]`, `(?<=` and `(?<!` are lookbehinds.

use std::collections::HashMap;

/// Up to this many `(?<` and `\k<` in a pattern, the crate's check runs on it as it is: at most this many
/// comparisons per name, so linear in the pattern's length.
const NAMES_CHECKED_DIRECTLY: usize = 64;

/// Whether `pattern` is what `jsonschema` calls a valid `regex`, in time linear in its length.
pub(super) fn is_valid(pattern: &str) -> bool {
    is_valid_with(pattern, NAMES_CHECKED_DIRECTLY)
}

/// [`is_valid`], with the crate's check run directly on patterns with up to `direct` names and references.
fn is_valid_with(pattern: &str, direct: usize) -> bool {
    let named = pattern.matches("(?<").count() + pattern.matches("\\k<").count();
    if named <= direct {
        return jsonschema_regex::is_valid_ecma_regex(pattern);
    }
    match without_names(pattern) {
        Some(rest) => jsonschema_regex::is_valid_ecma_regex(&rest),
        None => false,
    }
}

/// An open group: where its paren is (one past its byte offset; the pattern itself is at 0), and its last `|`.
struct Frame {
    opened: usize,
    last_bar: usize,
}

/// `pattern` with its named groups unnamed and its references made `.`, or `None` when its names are not
/// what the crate allows: a name that is not an identifier, two groups of one name that can both take part in
/// a match, a reference to a name no group declares.
///
/// Two groups may share a name when they sit in different alternatives of some enclosing disjunction. Of two
/// groups of one name, the innermost group open around both (at the later one) is the one whose alternatives
/// could part them: they clash unless a `|` of that group's own comes between them. And when two of a name's
/// groups clash, two that follow each other do (the innermost group around those is the first's or a group
/// inside it, and the stretch between them lies inside the first pair's), so each group is held to the last one
/// of its name.
fn without_names(pattern: &str) -> Option<String> {
    let mut rest = String::with_capacity(pattern.len());
    let mut frames = vec![Frame { opened: 0, last_bar: 0 }];
    let mut last_of: HashMap<String, usize> = HashMap::new();
    let mut referenced: Vec<String> = Vec::new();
    let mut in_class = false;
    let mut reader = Reader { pattern, position: 0 };
    while let Some(c) = reader.bump() {
        let at = reader.position - c.len_utf8();
        if in_class {
            rest.push(c);
            match c {
                '\\' => rest.extend(reader.bump()),
                ']' => in_class = false,
                _ => {}
            }
            continue;
        }
        match c {
            '\\' if reader.rest().starts_with("k<") => {
                reader.position += 2;
                referenced.push(reader.group_name()?);
                rest.push('.');
            }
            '\\' => {
                rest.push(c);
                rest.extend(reader.bump());
            }
            '[' => {
                in_class = true;
                rest.push(c);
            }
            '(' => {
                let opened = at + 1;
                let tail = reader.rest();
                if tail.starts_with("?<") && !tail.starts_with("?<=") && !tail.starts_with("?<!") {
                    reader.position += 2;
                    let name = reader.group_name()?;
                    if let Some(&before) = last_of.get(&name) {
                        // The innermost group still open that was opened before the other one.
                        let around = frames.partition_point(|frame| frame.opened < before) - 1;
                        if frames[around].last_bar < before {
                            return None;
                        }
                    }
                    last_of.insert(name, opened);
                }
                frames.push(Frame { opened, last_bar: 0 });
                rest.push('(');
            }
            ')' => {
                // The crate refuses a `)` with no group open; so does the pattern left, which keeps it.
                if frames.len() > 1 {
                    frames.pop();
                }
                rest.push(c);
            }
            '|' => {
                frames.last_mut().expect("the pattern's own frame is never popped").last_bar = at + 1;
                rest.push(c);
            }
            _ => rest.push(c),
        }
    }
    referenced.iter().all(|name| last_of.contains_key(name)).then_some(rest)
}

/// The pattern read a character at a time.
struct Reader<'a> {
    pattern: &'a str,
    position: usize,
}

impl Reader<'_> {
    fn rest(&self) -> &str {
        &self.pattern[self.position..]
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.rest().chars().next()?;
        self.position += c.len_utf8();
        Some(c)
    }

    fn eat(&mut self, expected: char) -> bool {
        let found = self.rest().starts_with(expected);
        if found {
            self.position += expected.len_utf8();
        }
        found
    }

    /// `name>` of a group name or reference, its `\u` escapes decoded, as `jsonschema_regex` reads it (an
    /// identifier: a letter, `$` or `_`, then letters, digits, `$`, `_`, ZWNJ or ZWJ).
    fn group_name(&mut self) -> Option<String> {
        let mut name = String::new();
        loop {
            let c = match self.bump()? {
                '>' => break,
                '\\' => {
                    if !self.eat('u') {
                        return None;
                    }
                    char::from_u32(self.unicode_escape()?)?
                }
                c => c,
            };
            let allowed = if name.is_empty() {
                c.is_alphabetic() || matches!(c, '$' | '_')
            } else {
                c.is_alphanumeric() || matches!(c, '$' | '_' | '\u{200C}' | '\u{200D}')
            };
            if !allowed {
                return None;
            }
            name.push(c);
        }
        (!name.is_empty()).then_some(name)
    }

    /// `{hex…}` or four hex digits after `\u`; a lead surrogate joins a following `\u` trail one.
    fn unicode_escape(&mut self) -> Option<u32> {
        if self.eat('{') {
            let mut value: u32 = 0;
            let mut digits = 0;
            while !self.eat('}') {
                value = value.saturating_mul(16).saturating_add(self.bump()?.to_digit(16)?);
                digits += 1;
            }
            return (digits > 0 && value <= 0x10_FFFF).then_some(value);
        }
        let lead = self.hex4()?;
        if (0xD800..=0xDBFF).contains(&lead) && self.rest().starts_with("\\u") {
            let position = self.position;
            self.position += 2;
            match self.hex4() {
                Some(trail) if (0xDC00..=0xDFFF).contains(&trail) => {
                    return Some(0x10000 + ((lead - 0xD800) << 10) + (trail - 0xDC00));
                }
                _ => self.position = position,
            }
        }
        Some(lead)
    }

    fn hex4(&mut self) -> Option<u32> {
        let mut value = 0;
        for _ in 0..4 {
            value = value * 16 + self.bump()?.to_digit(16)?;
        }
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    use super::*;

    /// The crate's own answer, and ours with every pattern checked in two parts.
    fn agree(pattern: &str) -> bool {
        let crate_says = jsonschema_regex::is_valid_ecma_regex(pattern);
        assert_eq!(is_valid_with(pattern, 0), crate_says, "{pattern:?}");
        assert_eq!(is_valid(pattern), crate_says, "{pattern:?}");
        crate_says
    }

    #[test]
    fn names_are_held_to_what_the_crate_allows() {
        for valid in [
            r"(?<a>x)|(?<a>y)",
            r"((?<a>x)|(?<a>y))",
            r"(?:(?<a>x)|y|(?<a>z))",
            r"((?<a>x)|((?<a>y)))",
            r"\k<a>(?<a>x)",
            r"(?<a>x)\k<a>",
            r"(?<\u0061>x)\k<a>",
            r"(?<\u{62}c>x)\k<bc>",
            r"(?<a\uD835\uDC9C>x)\k<a𝒜>",
            r"(?<$_é>x)",
            r"[(?<a>](?<a>x)",
            r"[\](?<a>)](?<a>x)",
            r"\(?<a>\)",
            r"(?<=a)(?<!b)(?<a>x)(?<b>y)",
            r"(?<a>x)*(?<b>x){2}\k<a>?",
            r"(?:(?<a>(?<b>x)|y)|z(?<a>v)|(?<b>w))",
        ] {
            assert!(agree(valid), "{valid}");
        }
        for invalid in [
            r"(?<a>x)(?<a>y)",
            r"(?<a>(?<b>x)|y)(?:z|(?<b>w))",
            r"((?<a>x)|(?<a>y))(?<a>z)",
            r"(?<a>x(?<a>y))",
            r"(?<a>x|(?<a>y))",
            r"(?:(?<a>x)|y)(?<a>z)",
            r"(?<a>x)|(?<b>y)(?<b>z)",
            r"\k<b>(?<a>x)",
            r"\k<a>",
            r"(?<>x)",
            r"(?<1a>x)",
            r"(?<a-b>x)",
            r"(?<a",
            r"(?<\u0061>x)(?<a>y)",
            r"(?<\uD835>x)",
            r"(?<\x61>x)",
            r"\k<a",
            r"(?<a>x))",
            r"((?<a>x)",
        ] {
            assert!(!agree(invalid), "{invalid}");
        }
    }

    #[test]
    fn many_names_are_checked_and_refused_alike() {
        let sequential: String = (0..5_000).map(|i| format!("(?<g{i}>a)")).collect();
        let nested = (0..5_000).map(|i| format!("(?<g{i}>a")).collect::<String>() + &")".repeat(5_000);
        let references = sequential.clone() + &(0..5_000).map(|i| format!("\\k<g{i}>")).collect::<String>();
        for pattern in [&sequential, &nested, &references] {
            assert!(is_valid(pattern));
        }
        assert!(!is_valid(&(sequential.clone() + "(?<g17>b)")));
        assert!(!is_valid(&(nested.clone() + "(?<g4999>b)")));
        assert!(is_valid(&format!("(?:{nested}|(?<g4999>b))")));
        assert!(!is_valid(&(references + "\\k<g5000>")));
    }

    /// Tokens that make names, references, groups, alternatives, classes and escapes meet in every order.
    fn token() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "(",
            ")",
            "(?<a>",
            "(?<b>",
            "(?<\\u0061>",
            "(?<=",
            "(?<!",
            "(?:",
            "(?i:",
            "|",
            "\\k<a>",
            "\\k<b>",
            "\\k<",
            "[",
            "]",
            "[^",
            "\\",
            "\\\\",
            "a",
            "b",
            "<",
            ">",
            "k",
            "\\u0062",
            "\\1",
            "\\2",
            "*",
            "?",
            "{1}",
            "\\c",
            "\\p{L}",
            "-",
            "^",
            "$",
            "?<",
            "(?",
            "\\(",
            "\\)",
            "\\[",
            "\\]",
            "\\|",
        ])
    }

    /// Patterns built well-formed: groups of every kind around alternatives of atoms, names repeated at every
    /// depth, references before and after their groups.
    fn well_formed() -> impl Strategy<Value = String> {
        let atom = prop::sample::select(vec![
            "a",
            "(?<a>a)",
            "(?<b>b)",
            "\\k<a>",
            "\\k<b>",
            "[(?<a>|]",
            "[\\](?<a>a)]",
            "\\(",
            "(?<=a)",
            "b*",
            "\\u{61}",
        ])
        .prop_map(str::to_owned);
        atom.prop_recursive(4, 48, 6, |inner| {
            let sequence = prop::collection::vec(inner, 1..4).prop_map(|items| items.concat());
            let alternatives = prop::collection::vec(sequence, 1..4).prop_map(|items| items.join("|"));
            (prop::sample::select(vec!["(", "(?<a>", "(?<b>", "(?<\\u0061>", "(?:", "(?!"]), alternatives)
                .prop_map(|(open, body)| format!("{open}{body})"))
        })
    }

    /// A well-formed pattern, one with a token put in or taken out, or tokens in any order.
    fn pattern() -> impl Strategy<Value = String> {
        prop_oneof![
            well_formed(),
            (well_formed(), any::<prop::sample::Index>(), token()).prop_map(|(pattern, at, token)| {
                let mut at = at.index(pattern.len() + 1);
                while !pattern.is_char_boundary(at) {
                    at -= 1;
                }
                format!("{}{token}{}", &pattern[..at], &pattern[at..])
            }),
            (well_formed(), any::<prop::sample::Index>()).prop_map(|(pattern, at)| {
                let mut at = at.index(pattern.len());
                while !pattern.is_char_boundary(at) {
                    at -= 1;
                }
                let mut pattern = pattern;
                pattern.remove(at);
                pattern
            }),
            prop::collection::vec(token(), 0..24).prop_map(|tokens| tokens.concat()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        #[test]
        fn the_two_part_check_agrees_with_the_crates(pattern in pattern()) {
            agree(&pattern);
        }
    }

    /// The generated patterns are valid and invalid alike, many with names: the agreement above is not vacuous.
    #[test]
    fn the_generated_patterns_are_valid_and_invalid_alike() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = pattern();
        let (mut named_valid, mut named_invalid, mut clashing) = (0, 0, 0);
        for _ in 0..2_000 {
            let pattern = strategy.new_tree(&mut runner).unwrap().current();
            let ok = jsonschema_regex::is_valid_ecma_regex(&pattern);
            let names = pattern.matches("(?<a>").count() + pattern.matches("(?<b>").count();
            named_valid += usize::from(ok && names > 0);
            named_invalid += usize::from(!ok && names > 0);
            // Invalid for its names alone: valid with each group given a name of its own.
            let mut unique = String::new();
            for (i, piece) in pattern.split("(?<a>").enumerate() {
                if i > 0 {
                    unique.push_str(&format!("(?<u{i}>"));
                }
                unique.push_str(piece);
            }
            clashing += usize::from(!ok && names > 1 && jsonschema_regex::is_valid_ecma_regex(&unique));
        }
        assert!(named_valid >= 200 && named_invalid >= 200, "{named_valid} named valid, {named_invalid} named invalid");
        assert!(clashing >= 50, "{clashing} refused for their names alone");
    }
}
