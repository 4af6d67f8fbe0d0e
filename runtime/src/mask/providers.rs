//! Provider tokens found by the rule set of gitleaks, the most used open-source secret scanner: its 222 rules
//! (`gitleaks.toml` beside this file, MIT, taken unchanged from gitleaks v8.30.1 by
//! `scripts/gitleaks_corpus.py`) are compiled at first use, with our precision filters on top.
//!
//! Linear time on any text, as gitleaks does it: one Aho-Corasick pass finds each rule's keywords
//! (`glpat-`, `xoxb`, `adafruit`, …); a rule's pattern then runs only in windows around its keywords' hits,
//! a window as wide as the longest match the pattern can make (at most [`MAX_WINDOW`]), the windows of one
//! rule merged, so each rule reads each byte at most once and only rules whose keywords occur run at all.
//!
//! Inside a window, a rule whose every match starts at one of its keywords (`ghp_…`), or a bounded run of a
//! class before one (gitleaks' `[\w.-]{0,50}?(?:adafruit)…`, [`Start`]), is not searched byte by byte: its
//! pattern runs anchored at the one place before each hit where a match using that hit would start, which
//! finds the same leftmost match as the search over the window (see [`Providers::search_from_hits`]) and
//! reads a few bytes per hit instead of the whole window, which on text dense with keywords is all of it.
//!
//! A match is kept when its secret (the rule's `secretGroup`, else the first group that took part) passes the
//! rule's entropy floor, gitleaks' global allowlist (placeholders such as `${VAR}`, `{{ x }}`, one repeated
//! letter), the rule's own allowlists (regexes on the secret, the match or the line; stop words) and ours:
//! text a masker wrote or a placeholder ([`is_mask_or_placeholder`]), one repeated character, a run of
//! `x`/`X` (`glpat-xxxxxxxx…`), an `EXAMPLE` suffix.

use std::sync::LazyLock;

use regex_automata::{Anchored, Input, Match, meta, util::captures::Captures, util::syntax};
use regex_syntax::hir::{
    Class, Hir, HirKind, Look, Repetition,
    literal::{ExtractKind, Extractor},
};
use serde::Deserialize;

use super::detect::{Finding, is_mask_or_placeholder};

/// gitleaks' default configuration, unchanged but for a header naming its source.
const RULES: &str = include_str!("gitleaks.toml");

/// Rules left to other detectors: gitleaks' generic key rule is our labelled-value pattern's job (names such as
/// `password`, `token`, `api_key` with our own precision filters), and private keys are masked as blocks.
const LEFT_OUT: &[&str] = &["generic-api-key", "private-key"];

/// The widest window a rule's pattern runs in on each side of a keyword: patterns without a bound on their
/// length (`curl … -H …`) are read this far.
pub(crate) const MAX_WINDOW: usize = 2048;

/// How far from a keyword its rule's match may start or end, beyond the match's own length.
const KEYWORD_REACH: usize = 128;

#[derive(Deserialize)]
struct Config {
    allowlist: AllowlistSpec,
    rules: Vec<RuleSpec>,
}

#[derive(Deserialize)]
struct RuleSpec {
    id: String,
    regex: Option<String>,
    #[serde(rename = "secretGroup")]
    secret_group: Option<usize>,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<AllowlistSpec>,
}

#[derive(Deserialize, Default)]
struct AllowlistSpec {
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(rename = "regexTarget")]
    regex_target: Option<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    condition: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    Secret,
    Match,
    Line,
}

struct Allowlist {
    /// Its regexes compiled together: one search per candidate, not one per regex.
    regexes: Option<meta::Regex>,
    target: Target,
    /// Its stop words in one automaton, ASCII case ignored: a secret is read once, not once per word (the
    /// global allowlist holds hundreds).
    stopwords: Option<aho_corasick::AhoCorasick>,
}

struct Rule {
    regex: meta::Regex,
    secret_group: Option<usize>,
    entropy: Option<f64>,
    window: usize,
    /// Where its matches start relative to its keywords' hits, when the pattern says so; `None`: anywhere in
    /// a window.
    start: Option<Start>,
    /// Every match begins with one of the rule's keywords (`ghp_…`, `xoxb-…`, `SK…`): its pattern then runs
    /// only from a keyword's start on, not around it.
    keyword_first: bool,
    /// Every match begins at an ASCII word boundary (`\b` first): a keyword glued to a word (`asked`, `key`)
    /// starts none.
    word_start: bool,
    allowlists: Vec<Allowlist>,
}

/// Every match of a rule starts with at most `max_before` bytes of `class` and then one of the rule's keywords
/// (ASCII case ignored), read from its pattern (`max_before` is 0 for `ghp_[0-9a-zA-Z]{36}`, 50 for gitleaks'
/// semi-generic `(?i)[\w.-]{0,50}?(?:adafruit)…`). Holds for ASCII text: `(?i)` lets `k` and `s` match the
/// Kelvin sign and the long s, which the keyword pass does not read as `k` and `s`, so a window holding a
/// non-ASCII byte is searched whole.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Start {
    max_before: usize,
    /// The ASCII bytes the run before the keyword may hold (`class[b]`).
    class: [bool; 128],
}

/// A rule's anchored searches in one window may read up to this many times the window (plus
/// [`ANCHORED_SLACK`]) before the rest of the window is searched whole: a bound on the bytes read however
/// dense the hits, with the same matches either way.
const ANCHORED_BUDGET: usize = 2;
const ANCHORED_SLACK: usize = 4096;

/// What starting one anchored search costs, in bytes a search reads in the same time (measured: about a
/// hundred nanoseconds per search, a lazy DFA reading a byte or two per nanosecond). A window is searched whole
/// when its hits' anchored searches would cost more than reading it.
const ANCHORED_SEARCH_COST: usize = 64;

/// The compiled rule set.
pub(crate) struct Providers {
    keywords: aho_corasick::AhoCorasick,
    /// The rules each keyword (by pattern id) starts.
    keyword_rules: Vec<Vec<usize>>,
    rules: Vec<Rule>,
    global: Allowlist,
}

/// How a window is searched: from its hits where a rule allows it and that costs less ([`Method::Cheaper`]),
/// or always one way (the tests compare the three).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Cheaper,
    FromHits,
    Windows,
}

/// The windows the rules' patterns run in, `(rule, from, to)`, no two of one rule overlapping; and where the
/// keywords of each rule with a [`Start`] were found (empty for the others).
struct Windows {
    windows: Vec<(usize, usize, usize)>,
    hits: Vec<Vec<usize>>,
}

/// One provider secret: `text[start..end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Secret {
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Go's regexp syntax as `regex-automata` reads it, ASCII classes throughout: Unicode word boundaries make the
/// lazy DFA give up on non-ASCII text. Nested classes (`[[0-9A-Za-z_].-]`) are valid here.
fn convert(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 32);
    let mut chars = pattern.chars().peekable();
    let mut repetition = false;
    let mut rest = pattern;
    while let Some(c) = chars.next() {
        rest = &rest[c.len_utf8()..];
        // Go reads a `{` that opens no repetition (`{\d+}`, `${{ x }}`) as a literal; here it must be escaped.
        if c == '{' && !repetition {
            let digits = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b',').count();
            repetition = digits > 0 && rest.as_bytes().get(digits) == Some(&b'}') && !rest.starts_with(',');
            out.push_str(if repetition { "{" } else { r"\{" });
            continue;
        }
        if c == '}' {
            out.push_str(if repetition { "}" } else { r"\}" });
            repetition = false;
            continue;
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        if let Some(next) = chars.peek() {
            rest = &rest[next.len_utf8()..];
        }
        match chars.next() {
            Some('b') => out.push_str(r"(?-u:\b)"),
            Some('B') => out.push_str(r"(?-u:\B)"),
            Some('w') => out.push_str("[0-9A-Za-z_]"),
            Some('W') => out.push_str("[^0-9A-Za-z_]"),
            Some('d') => out.push_str("[0-9]"),
            Some('D') => out.push_str("[^0-9]"),
            Some('s') => out.push_str(r"[\t\n\x0C\r ]"),
            Some('S') => out.push_str(r"[^\t\n\x0C\r ]"),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

fn compile(pattern: &str) -> Result<meta::Regex, String> {
    let converted = convert(pattern);
    meta::Regex::builder()
        // A small cache per rule: a rule reads short windows, and 222 rules with gitleaks' default would
        // cost memory for nothing.
        .configure(meta::Config::new().hybrid_cache_capacity(256 * 1024))
        .build(&converted)
        .map_err(|err| format!("{pattern}: {err}"))
}

impl Allowlist {
    fn compile(spec: &AllowlistSpec) -> Result<Option<Allowlist>, String> {
        // An allowlist that needs a file path (`condition = "AND"` with paths) never applies to a tool's result.
        if !spec.paths.is_empty() && spec.condition.as_deref() == Some("AND") {
            return Ok(None);
        }
        if spec.regexes.is_empty() && spec.stopwords.is_empty() {
            return Ok(None);
        }
        let target = match spec.regex_target.as_deref() {
            Some("match") => Target::Match,
            Some("line") => Target::Line,
            _ => Target::Secret,
        };
        let regexes = if spec.regexes.is_empty() {
            None
        } else {
            let converted: Vec<String> = spec.regexes.iter().map(|r| convert(r)).collect();
            let regex = meta::Regex::builder()
                .configure(meta::Config::new().hybrid_cache_capacity(256 * 1024))
                .build_many(&converted)
                .map_err(|err| format!("allowlist: {err}"))?;
            Some(regex)
        };
        let stopwords = if spec.stopwords.is_empty() {
            None
        } else {
            let automaton = aho_corasick::AhoCorasick::builder()
                .ascii_case_insensitive(true)
                .build(&spec.stopwords)
                .map_err(|err| format!("allowlist: {err}"))?;
            Some(automaton)
        };
        Ok(Some(Allowlist { regexes, target, stopwords }))
    }

    fn allows<'t>(&self, secret: &'t str, matched: &'t str, line: impl Fn() -> &'t str) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line(),
        };
        if self.regexes.as_ref().is_some_and(|regex| regex.is_match(target)) {
            return true;
        }
        self.stopwords.as_ref().is_some_and(|words| words.is_match(secret))
    }
}

impl Providers {
    fn build() -> Result<Providers, String> {
        let config: Config = toml::from_str(RULES).map_err(|err| err.to_string())?;
        let global = Allowlist::compile(&config.allowlist)?.unwrap_or(Allowlist {
            regexes: None,
            target: Target::Secret,
            stopwords: None,
        });
        let mut rules = Vec::new();
        let mut keywords: Vec<String> = Vec::new();
        let mut keyword_rules: Vec<Vec<usize>> = Vec::new();
        for spec in config.rules {
            let Some(pattern) = spec.regex.as_deref() else { continue };
            if LEFT_OUT.contains(&spec.id.as_str()) || spec.keywords.is_empty() {
                continue;
            }
            let regex = compile(pattern)?;
            let hir = syntax::parse(&convert(pattern)).ok();
            let longest = hir.as_ref().and_then(|hir| hir.properties().maximum_len()).unwrap_or(MAX_WINDOW);
            let lower: Vec<String> = spec.keywords.iter().map(|k| k.to_ascii_lowercase()).collect();
            let keyword_first = hir.as_ref().is_some_and(|hir| begins_with_keyword(hir, &lower));
            let word_start = keyword_first
                && hir.as_ref().is_some_and(|hir| hir.properties().look_set_prefix().contains(Look::WordAscii));
            let mut allowlists = Vec::new();
            for allow in &spec.allowlists {
                allowlists.extend(Allowlist::compile(allow)?);
            }
            let start = start_of(pattern, &lower);
            let index = rules.len();
            rules.push(Rule {
                regex,
                secret_group: spec.secret_group,
                entropy: spec.entropy,
                window: longest.min(MAX_WINDOW),
                start,
                keyword_first,
                word_start,
                allowlists,
            });
            for keyword in lower {
                match keywords.iter().position(|k| *k == keyword) {
                    Some(at) => keyword_rules[at].push(index),
                    None => {
                        keywords.push(keyword);
                        keyword_rules.push(vec![index]);
                    }
                }
            }
        }
        // A DFA: the keyword pass reads every byte of every result, and the NFA kinds read a byte several
        // times slower (a few hundred keywords over all letters leave no prefilter to skip with).
        let keywords = aho_corasick::AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(&keywords)
            .map_err(|err| err.to_string())?;
        Ok(Providers { keywords, keyword_rules, rules, global })
    }

    /// Calls `on_secret` for each provider secret in `text`, in order of start, never overlapping, but for
    /// those inside one of `covered` (other findings, in order, never overlapping): a window that lies inside
    /// one of them is not searched. Whatever it would find lies inside that finding, and so does anything
    /// such a secret would keep out (a secret overlapping it overlaps the finding), so leaving the window out
    /// changes nothing the caller keeps (it drops every secret overlapping a finding). A provider key our own
    /// patterns found (`AKIA…`, `ghp_…`) is thus not matched, captured and weighed a second time.
    pub(crate) fn find(&self, text: &str, covered: &[Finding], mut on_secret: impl FnMut(Secret)) {
        self.find_with(text, covered, Method::Cheaper, &mut on_secret);
    }

    /// [`Providers::find`], each window searched by `method` (the others are what the tests compare it with).
    fn find_with(&self, text: &str, covered: &[Finding], method: Method, on_secret: &mut dyn FnMut(Secret)) {
        let Windows { windows, hits } = self.windows(text);
        if windows.is_empty() {
            return;
        }
        let inside_covered = |from: usize, to: usize| {
            let before = covered.partition_point(|f| f.start <= from);
            before > 0 && covered[before - 1].end >= to
        };
        let mut found: Vec<Secret> = Vec::new();
        for (rule_index, from, to) in windows {
            if inside_covered(from, to) {
                continue;
            }
            let rule = &self.rules[rule_index];
            match rule.start.as_ref() {
                Some(start) if method != Method::Windows && text.as_bytes()[from..to].is_ascii() => {
                    let hits = &hits[rule_index];
                    let inside = hits.partition_point(|&q| q < to) - hits.partition_point(|&q| q < from);
                    let cost = inside.saturating_mul(ANCHORED_SEARCH_COST + rule.window.min(to - from));
                    if method == Method::FromHits || cost < to - from {
                        self.search_from_hits(rule_index, start, text, from, to, hits, &mut found);
                    } else {
                        // Hits so dense (`glpat-` on every line) that reading the window once costs less.
                        self.search_window(rule_index, text, from, to, &mut found);
                    }
                }
                _ => self.search_window(rule_index, text, from, to, &mut found),
            }
        }
        found.sort_by_key(|secret| (secret.start, std::cmp::Reverse(secret.end)));
        let mut last_end = 0;
        for secret in found {
            if secret.start >= last_end {
                last_end = secret.end;
                on_secret(secret);
            }
        }
    }

    /// The windows `(rule, from, to)` the rules' patterns run in, and each rule's hits (where its keywords
    /// start, in order) for the rules with a [`Start`].
    fn windows(&self, text: &str) -> Windows {
        // The windows of each rule, merged as hits come in order; allocated at the first hit that opens one, so
        // a text with no keyword costs only the keyword pass.
        let bytes = text.as_bytes();
        let mut open: Vec<Option<(usize, usize)>> = Vec::new();
        let mut windows: Vec<(usize, usize, usize)> = Vec::new();
        let mut hits: Vec<Vec<usize>> = Vec::new();
        for hit in self.keywords.find_overlapping_iter(text) {
            for &rule in &self.keyword_rules[hit.pattern().as_usize()] {
                let spec = &self.rules[rule];
                let (from, to) = if spec.keyword_first {
                    // A match starts at a keyword's start and is at most `window` long (an unbounded pattern is
                    // read as far as an unanchored one is).
                    if spec.word_start
                        && hit.start() > 0
                        && is_word(bytes[hit.start() - 1])
                        && is_word(bytes[hit.start()])
                    {
                        continue;
                    }
                    let extra = if spec.window >= MAX_WINDOW { KEYWORD_REACH } else { 0 };
                    (hit.start(), (hit.start() + spec.window + extra).min(text.len()))
                } else {
                    // A keyword need not be inside the match (`airtable_token: pat…` has the rule's keyword in
                    // its label only): the window reaches [`KEYWORD_REACH`] further.
                    let reach = spec.window + KEYWORD_REACH;
                    (hit.end().saturating_sub(reach), (hit.start() + reach).min(text.len()))
                };
                if open.is_empty() {
                    open = vec![None; self.rules.len()];
                    hits = vec![Vec::new(); self.rules.len()];
                }
                if spec.start.is_some() {
                    hits[rule].push(hit.start());
                }
                match &mut open[rule] {
                    Some((_, end)) if from <= *end => *end = (*end).max(to),
                    slot => {
                        if let Some((start, end)) = slot.replace((from, to)) {
                            windows.push((rule, start, end));
                        }
                    }
                }
            }
        }
        windows.extend(open.iter().enumerate().filter_map(|(rule, w)| w.map(|(s, e)| (rule, s, e))));
        // Overlapping hits come in order of their ends: only two keywords of one rule, one ending inside the
        // other, put them out of order (sorting every rule's hits cost more than the anchored searches saved).
        for starts in &mut hits {
            if !starts.is_sorted() {
                starts.sort_unstable();
            }
            starts.dedup();
        }
        Windows { windows, hits }
    }

    /// The kept matches of a rule with a [`Start`] in `text[from..to]` (ASCII), as
    /// [`Providers::search_window`] finds them, from the rule's `hits` (sorted).
    ///
    /// Every match starts at most `max_before` bytes of `class` before a hit, so where a match starting at or
    /// after `at` can start is, for each hit `q` from `at` on, `s(q)`: `q` less the run of `class` before it
    /// (at most `max_before`, not before `at`). A match exists at `s(q)` if one starting anywhere from `s(q)`
    /// to `q` goes through `q` (the run before `q` is all the prefix needs), and `s` never decreases with `q`,
    /// so the first `s(q)`, in the order of the hits, at which the pattern matches anchored is where the
    /// leftmost match starts, and the anchored search there finds the match the search over the window finds
    /// (leftmost-first: the same pattern, the same start). After a match the same goes on from its end.
    #[allow(clippy::too_many_arguments)] // private helper of `find_with`; a struct would only rename them
    fn search_from_hits(
        &self,
        rule_index: usize,
        start: &Start,
        text: &str,
        from: usize,
        to: usize,
        hits: &[usize],
        found: &mut Vec<Secret>,
    ) {
        let rule = &self.rules[rule_index];
        let bytes = text.as_bytes();
        let budget = ANCHORED_BUDGET * (to - from) + ANCHORED_SLACK;
        let mut read = 0;
        let mut caps: Option<Captures> = None;
        let mut at = from;
        let mut last_tried = None;
        for &q in &hits[hits.partition_point(|&q| q < from)..] {
            if q >= to {
                break;
            }
            if q < at {
                continue;
            }
            let mut s = q;
            while s > at && q - s < start.max_before && start.class.get(usize::from(bytes[s - 1])) == Some(&true) {
                s -= 1;
            }
            if last_tried == Some(s) {
                continue;
            }
            last_tried = Some(s);
            if read > budget {
                // Hits so dense that anchored searches would read more than the window: search the rest whole.
                self.search_window(rule_index, text, at, to, found);
                return;
            }
            // An anchored search reads at most to the window's end, and a bounded pattern's at most its longest
            // match and one byte more.
            read += if rule.window < MAX_WINDOW { (rule.window + 1).min(to - s) } else { to - s };
            let Some(located) = rule.regex.search(&Input::new(text).range(s..to).anchored(Anchored::Yes)) else {
                continue;
            };
            at = self.accept(rule, text, located, &mut caps, found);
        }
    }

    /// Pushes the kept matches of one rule's pattern in `text[from..to]` to `found`.
    fn search_window(&self, rule_index: usize, text: &str, from: usize, to: usize, found: &mut Vec<Secret>) {
        let rule = &self.rules[rule_index];
        let mut caps: Option<Captures> = None;
        let mut at = from;
        while at < to {
            // The lazy DFA finds the match; the slower capture engines then read only the match itself.
            let Some(located) = rule.regex.search(&Input::new(text).range(at..to)) else { break };
            at = self.accept(rule, text, located, &mut caps, found);
        }
    }

    /// Pushes the secret of the match `located` to `found` if it is kept; returns where the next match may
    /// start.
    fn accept(
        &self,
        rule: &Rule,
        text: &str,
        located: Match,
        caps: &mut Option<Captures>,
        found: &mut Vec<Secret>,
    ) -> usize {
        let input = Input::new(text).range(located.range()).anchored(Anchored::Yes);
        let caps = caps.get_or_insert_with(|| rule.regex.create_captures());
        rule.regex.search_captures(&input, caps);
        let Some(whole) = caps.get_match() else {
            return located.end().max(located.start() + 1);
        };
        let next = if whole.end() > whole.start() { whole.end() } else { whole.end() + 1 };
        let span = match rule.secret_group {
            Some(group) => caps.get_group(group),
            None => (1..caps.group_len()).find_map(|group| caps.get_group(group)),
        }
        .unwrap_or(whole.span());
        // A span of a regex over `text` lies on character boundaries unless an ASCII class met a multi-byte
        // character; such a span is no token.
        if let (Some(secret), Some(matched)) = (text.get(span.range()), text.get(whole.range()))
            && self.keep(rule, text, secret, matched, span.start)
        {
            found.push(Secret { start: span.start, end: span.end });
        }
        next
    }

    fn keep(&self, rule: &Rule, text: &str, secret: &str, matched: &str, start: usize) -> bool {
        let secret = secret.trim();
        if secret.len() < 8 || !plausible(secret) {
            return false;
        }
        if rule.entropy.is_some_and(|floor| shannon_entropy(secret) < floor) {
            return false;
        }
        // The line only where an allowlist reads it (none of the rules kept does): finding it reads back and
        // forward to a newline, which on text with no newline costs the whole text per match.
        let line = || {
            let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
            &text[line_start..line_end]
        };
        !self.global.allows(secret, matched, line)
            && !rule.allowlists.iter().any(|allow| allow.allows(secret, matched, line))
    }
}

/// Where a rule's matches start ([`Start`]), read from its pattern: a leading run of repetitions of one
/// class, each from zero (`[\w.-]{0,50}?`, as many as gitleaks' semi-generic rules nest), then literals that
/// each begin with a keyword. The pattern is read without a leading `(?i)`, whose literals would be too many to
/// list (every case of `adafruit`); with it the same literals match in any ASCII case, which the keyword pass
/// ignores, and the run's class is taken in both cases. `None` when the pattern has no such shape.
fn start_of(pattern: &str, keywords: &[String]) -> Option<Start> {
    let (pattern, folded) = match pattern.strip_prefix("(?i)") {
        Some(rest) => (rest, true),
        None => (pattern, false),
    };
    let hir = syntax::parse(&convert(pattern)).ok()?;
    let subs: &[Hir] = match hir.kind() {
        HirKind::Concat(subs) => subs,
        _ => std::slice::from_ref(&hir),
    };
    let mut max_before = 0usize;
    let mut class: Option<[bool; 128]> = None;
    let mut peeled = 0;
    for sub in subs {
        let HirKind::Repetition(Repetition { min: 0, max: Some(max), sub: repeated, .. }) = sub.kind() else { break };
        let HirKind::Class(repeated_class) = repeated.kind() else { break };
        let bytes = ascii_bytes(repeated_class, false);
        // With `(?i)` read off, a class is exact only if case does not change it (`[\w.-]`).
        if (folded && ascii_bytes(repeated_class, true) != bytes) || class.is_some_and(|class| class != bytes) {
            break;
        }
        class = Some(bytes);
        max_before += usize::try_from(*max).ok()?;
        peeled += 1;
    }
    let rest = Hir::concat(subs[peeled..].to_vec());
    begins_with_keyword(&rest, keywords).then(|| Start { max_before, class: class.unwrap_or([false; 128]) })
}

/// The ASCII bytes `class` matches, in either ASCII case if `folded`.
fn ascii_bytes(class: &Class, folded: bool) -> [bool; 128] {
    let mut bytes = [false; 128];
    for byte in 0u8..128 {
        let matches = |b: u8| match class {
            Class::Unicode(class) => {
                class.ranges().iter().any(|r| r.start() <= char::from(b) && char::from(b) <= r.end())
            }
            Class::Bytes(class) => class.ranges().iter().any(|r| r.start() <= b && b <= r.end()),
        };
        bytes[usize::from(byte)] =
            matches(byte) || (folded && (matches(byte.to_ascii_lowercase()) || matches(byte.to_ascii_uppercase())));
    }
    bytes
}

/// Whether every match of `hir` begins with one of `keywords` (lower case), as its literal prefixes say; `false`
/// when they cannot say (too many, or a class first).
fn begins_with_keyword(hir: &Hir, keywords: &[String]) -> bool {
    let prefixes = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let Some(literals) = prefixes.literals() else { return false };
    !literals.is_empty()
        && literals.iter().all(|literal| {
            let lower = literal.as_bytes().to_ascii_lowercase();
            keywords.iter().any(|keyword| lower.starts_with(keyword.as_bytes()))
        })
}

fn is_word(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_'
}

/// Our filters on a provider secret: not a mask or placeholder, not one repeated character, no run of five
/// `x` or `X` (`glpat-xxxxxxxx-…`, `XXXXXXXXXX`), not an `EXAMPLE` key.
fn plausible(secret: &str) -> bool {
    let bytes = secret.as_bytes();
    let mut body = bytes.iter().copied().filter(u8::is_ascii_alphanumeric);
    let repeated = body.next().is_none_or(|first| body.all(|b| b == first));
    let x_run = has_run(bytes, b'x', 5) || has_run(bytes, b'X', 5);
    !(repeated || x_run || secret.ends_with("EXAMPLE") || is_mask_or_placeholder(secret))
}

/// Whether `bytes` holds `len` copies of `byte` in a row.
fn has_run(bytes: &[u8], byte: u8, len: usize) -> bool {
    let mut run = 0;
    bytes.iter().any(|&b| {
        run = if b == byte { run + 1 } else { 0 };
        run >= len
    })
}

/// Bits of entropy per character, as gitleaks measures a secret.
fn shannon_entropy(text: &str) -> f64 {
    let mut counts = [0usize; 256];
    for &b in text.as_bytes() {
        counts[usize::from(b)] += 1;
    }
    let len = text.len() as f64;
    counts.iter().filter(|&&n| n > 0).map(|&n| n as f64 / len).map(|p| -p * p.log2()).sum()
}

static PROVIDERS: LazyLock<Option<Providers>> = LazyLock::new(|| match Providers::build() {
    Ok(providers) => Some(providers),
    Err(err) => {
        tracing::error!(error = %err, "agent-airlock provider rules failed to compile");
        None
    }
});

/// The compiled rule set, shared by every masker in the process; `None` if it failed to compile (a test
/// holds that it compiles).
pub(crate) fn providers() -> Option<&'static Providers> {
    PROVIDERS.as_ref()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests {
    use super::*;

    fn secrets(text: &str) -> Vec<&str> {
        let mut found = Vec::new();
        providers().unwrap().find(text, &[], |s| found.push(&text[s.start..s.end]));
        found
    }

    #[test]
    fn every_rule_compiles() {
        let providers = Providers::build().unwrap();
        assert!(providers.rules.len() > 190, "{} rules", providers.rules.len());
    }

    #[test]
    fn a_provider_token_is_found_in_any_shape() {
        let token = "glpat-Zq8vN2kP4rT6wY1xB3mC";
        for text in [token.to_owned(), format!("GITLAB_TOKEN := \"{token}\""), format!("<t>\n  {token}\n</t>")] {
            assert_eq!(secrets(&text), [token], "{text}");
        }
    }

    #[test]
    fn placeholders_and_examples_are_not_secrets() {
        for text in ["glpat-XXXXXXXXXXX-XXXXXXXX", "AKIAIOSFODNN7EXAMPLE", "xoxb-xxxxxxxxx-xxxxxxxxxx-xxxxxxxxxxxx"] {
            assert!(secrets(text).is_empty(), "{text}");
        }
        assert!(secrets("https://indieweb.org/images/3/35/2018-250-xoxo-indieweb-1.jpg").is_empty());
    }

    #[test]
    fn a_keyword_dense_text_reads_each_window_once() {
        // Every byte is near a keyword: the windows of each rule merge into one.
        let text = "glpat-".repeat(50_000);
        assert!(secrets(&text).is_empty());
    }

    fn rule<'a>(providers: &'a Providers, id_keyword: &str) -> &'a Rule {
        let at = providers.keywords.find(id_keyword).unwrap().pattern().as_usize();
        &providers.rules[providers.keyword_rules[at][0]]
    }

    #[test]
    fn rules_whose_tokens_begin_with_a_keyword_are_known() {
        let providers = providers().unwrap();
        for keyword in ["ghp_", "xoxb", "glpat-", "sk", "ey", "s.", "akia"] {
            assert!(rule(providers, keyword).keyword_first, "{keyword}");
        }
        for keyword in ["ey", "akia", "s.", "a3-"] {
            assert!(rule(providers, keyword).word_start, "{keyword}");
        }
        // Azure's client secret has its keyword inside (`abc8Q~…`), Airtable's in a label only.
        for keyword in ["q~", "airtable"] {
            assert!(!rule(providers, keyword).keyword_first, "{keyword}");
        }
    }

    #[test]
    fn a_keyword_glued_to_a_word_opens_no_window() {
        let providers = providers().unwrap();
        // `sk`, `ey`, `s.`, `akia` inside words and ids: each rule needs a word boundary or a token after them.
        let text = "Customer asked for SKU-880001; they keyed it. the boss.\nnakia";
        let opened: Vec<_> = providers.windows(text).windows.into_iter().map(|(_, from, to)| &text[from..to]).collect();
        // Only Twilio's `SK…` (no boundary in its pattern) reads from `sked` and `SKU` on, 34 bytes at most each.
        assert!(opened.iter().map(|w| w.len()).sum::<usize>() <= 2 * 34, "{opened:?}");
        assert!(secrets(text).is_empty());
        // The same keywords starting tokens are still found.
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(secrets(&format!("they sent {jwt} ")), [jwt]);
        assert_eq!(secrets("asked SK0123456789abcdef0123456789abcdef"), ["SK0123456789abcdef0123456789abcdef"]);
    }

    #[test]
    fn where_matches_start_is_read_from_the_patterns() {
        let providers = providers().unwrap();
        let word: [bool; 128] = std::array::from_fn(|b| {
            let b = u8::try_from(b).unwrap();
            b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-'
        });
        // gitleaks' semi-generic rules, with one run before the keyword or two nested ones.
        assert_eq!(rule(providers, "adafruit").start, Some(Start { max_before: 50, class: word }));
        assert_eq!(rule(providers, "meraki").start, Some(Start { max_before: 100, class: word }));
        // Tokens that start with their keyword; `(?i)CLOJARS_…` too, though its literals in every case are many.
        for keyword in ["ghp_", "glpat-", "akia", "clojars_", "npm_"] {
            assert_eq!(rule(providers, keyword).start.as_ref().map(|start| start.max_before), Some(0), "{keyword}");
        }
        // Unbounded too: the budget counts what such a search may read, to the window's end.
        for keyword in ["ey", "xoxb", "ops_"] {
            assert_eq!(rule(providers, keyword).start.as_ref().map(|start| start.max_before), Some(0), "{keyword}");
        }
        // A keyword inside the token (Azure's `…8Q~…`), or a YAML block (`kind: secret … data: …`): searched in
        // windows.
        for keyword in ["q~", "secret"] {
            assert!(rule(providers, keyword).start.is_none(), "{keyword}");
        }
        let anchored = providers.rules.iter().filter(|rule| rule.start.is_some()).count();
        assert!(anchored > 150, "{anchored} of {} rules start from their hits", providers.rules.len());
    }

    /// Texts in which the anchored searches from hits and the search of whole windows must agree: gitleaks'
    /// samples cut, glued and repeated, keywords dense, runs of the semi-generic prefix's class, the Kelvin
    /// sign and the long s that `(?i)` folds to `k` and `s`.
    fn generated_texts() -> Vec<String> {
        let samples: Vec<&str> = [
            include_str!("../../../tests/masking/gitleaks/true_positives.tsv"),
            include_str!("../../../tests/masking/gitleaks/false_positives.tsv"),
        ]
        .into_iter()
        .flat_map(str::lines)
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.rsplit('\t').next())
        .collect();
        let fragments = [
            "adafruit",
            "_key",
            " = ",
            ":",
            "\"",
            "'",
            "ghp_",
            "glpat-",
            "xoxb-",
            "AKIA",
            "sk",
            "SK",
            "ey",
            ".",
            "-",
            "\n",
            " ",
            "a",
            "Z",
            "0",
            "9",
            "_",
            "meraki",
            "okta_token=",
            "\u{212A}",
            "\u{17F}",
            "é",
            "clojars_",
            "abcdef0123456789abcdef0123456789",
            "x",
            "=",
            "${",
            "}",
            "\\n",
            "api_org_",
            "s.",
            "EAAC",
            "q~",
        ];
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move |n: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % u64::try_from(n).unwrap()).unwrap()
        };
        let mut texts = Vec::new();
        for _ in 0..600 {
            let mut text = String::new();
            for _ in 0..1 + next(12) {
                match next(4) {
                    0 => {
                        let sample = samples[next(samples.len())];
                        // A sample cut at a character boundary, or whole.
                        let mut cut = next(sample.len() + 1);
                        while !sample.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        text.push_str(if next(2) == 0 { sample } else { &sample[..cut] });
                    }
                    1 => text.push_str(samples[next(samples.len())]),
                    _ => text.push_str(fragments[next(fragments.len())]),
                }
            }
            texts.push(text);
        }
        // Dense hits: the budget's fallback to the window search is taken part of the way.
        texts.push("adafruit".repeat(3_000));
        texts.push(format!("{}adafruit_key = {}", "a.b-c_".repeat(40), "abcdef0123456789".repeat(2)));
        texts.push("glpat-".repeat(2_000) + "glpat-Zq8vN2kP4rT6wY1xB3mC");
        // Unbounded rules: a long run after one hit, hits dense in a long window.
        texts.push(format!(
            "x eyJ{} {}",
            "a".repeat(5_000),
            " eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0".repeat(300)
        ));
        texts.push(format!("{} xoxb-1234567890-1234567890abc", "xoxb-123456789012-".repeat(500)));
        texts
    }

    #[test]
    fn searching_from_hits_finds_what_searching_windows_finds() {
        let providers = providers().unwrap();
        let mut compared = 0;
        let mut with_secrets = 0;
        for text in generated_texts() {
            let (mut from_hits, mut cheaper, mut whole) = (Vec::new(), Vec::new(), Vec::new());
            providers.find_with(&text, &[], Method::FromHits, &mut |s| from_hits.push(s));
            providers.find_with(&text, &[], Method::Cheaper, &mut |s| cheaper.push(s));
            providers.find_with(&text, &[], Method::Windows, &mut |s| whole.push(s));
            assert_eq!(from_hits, whole, "{text:?}");
            assert_eq!(cheaper, whole, "{text:?}");
            compared += 1;
            with_secrets += usize::from(!whole.is_empty());
        }
        // Not vacuous: most texts hold a secret.
        assert!(with_secrets * 2 > compared, "{with_secrets} of {compared}");
    }

    #[test]
    fn go_classes_become_ascii_classes() {
        assert_eq!(convert(r"[\w.-]{0,50}\b\s"), r"[[0-9A-Za-z_].-]{0,50}(?-u:\b)[\t\n\x0C\r ]");
        assert_eq!(convert(r"^\$(?:\d+|{\d+})$"), r"^\$(?:[0-9]+|\{[0-9]+\})$");
    }
}
