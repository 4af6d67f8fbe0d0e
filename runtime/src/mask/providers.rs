//! Provider tokens found by the rule set of gitleaks, the most used open-source secret scanner: its 222 rules
//! (`gitleaks.toml` beside this file, MIT, taken unchanged from gitleaks v8.30.1 by
//! `scripts/gitleaks_corpus.py`) are compiled at first use, with our precision filters on top.
//!
//! Linear time on any text, as gitleaks does it: one Aho-Corasick pass finds each rule's keywords
//! (`glpat-`, `xoxb`, `adafruit`, …); a rule's pattern then runs only in windows around its keywords' hits,
//! a window as wide as the longest match the pattern can make (at most [`MAX_WINDOW`]), the windows of one
//! rule merged, so each rule reads each byte at most once and only rules whose keywords occur run at all.
//!
//! A match is kept when its secret (the rule's `secretGroup`, else the first group that took part) passes the
//! rule's entropy floor, gitleaks' global allowlist (placeholders such as `${VAR}`, `{{ x }}`, one repeated
//! letter), the rule's own allowlists (regexes on the secret, the match or the line; stop words) and ours:
//! text a masker wrote or a placeholder ([`is_mask_or_placeholder`]), one repeated character, a run of
//! `x`/`X` (`glpat-xxxxxxxx…`), an `EXAMPLE` suffix.

use std::sync::LazyLock;

use aho_corasick::automaton::Automaton;
use regex_automata::{Anchored, Input, meta, util::captures::Captures, util::syntax};
use regex_syntax::hir::{
    Hir, HirKind, Look,
    literal::{ExtractKind, Extractor},
};
use serde::Deserialize;

use super::detect::{Finding, is_mask_or_placeholder};
use super::screen;

/// gitleaks' default configuration, unchanged but for a header naming its source.
const RULES: &str = include_str!("gitleaks.toml");

/// Rules left to other detectors: gitleaks' generic key rule is our labelled-value pattern's job (names such as
/// `password`, `token`, `api_key` with our own precision filters), private keys are masked as blocks, and a
/// Kubernetes Secret's data is read by its own pattern (`detect::verify_secret_data`: every member, YAML or
/// `kubectl`'s JSON). gitleaks runs `kubernetes-secret-yaml` on `.yaml` files only; run on every text, its window of
/// 2 KiB around each `secret` cost ~2,000 instructions a byte on `kubectl get secret -o yaml` output and 94 on prose
/// naming secrets (a lazy DFA out of room, and a capture search clearing a bitset the size of its NFA per match).
const LEFT_OUT: &[&str] = &["generic-api-key", "private-key", "kubernetes-secret-yaml"];

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
    /// Its stop words in one automaton, ASCII case ignored: a secret is read once, not once per word (gitleaks'
    /// generic rule's allowlist holds hundreds).
    stopwords: Option<aho_corasick::AhoCorasick>,
}

struct Rule {
    regex: meta::Regex,
    secret_group: Option<usize>,
    /// The secret a match reports is always the whole match ([`secret_is_whole_match`]): no capture search.
    whole_match_secret: bool,
    entropy: Option<f64>,
    window: usize,
    /// Every match begins with one of the rule's keywords (`ghp_…`, `xoxb-…`, `SK…`): its pattern then runs
    /// only from a keyword's start on, not around it.
    keyword_first: bool,
    /// Every match begins at an ASCII word boundary (`\b` first): a keyword glued to a word (`asked`, `key`)
    /// starts none.
    word_start: bool,
    allowlists: Vec<Allowlist>,
}

impl Rule {
    /// The window a keyword found at `start..end` of `bytes` opens for this rule, or none when the keyword
    /// cannot start a match (glued to a word before it, for a rule whose matches start at a word boundary).
    #[inline]
    fn window_at(&self, bytes: &[u8], start: usize, end: usize) -> Option<(usize, usize)> {
        if self.keyword_first {
            // A match starts at a keyword's start and is at most `window` long (an unbounded pattern is read as
            // far as an unanchored one is).
            if self.word_start && start > 0 && is_word(bytes[start - 1]) && is_word(bytes[start]) {
                return None;
            }
            let extra = if self.window >= MAX_WINDOW { KEYWORD_REACH } else { 0 };
            Some((start, (start + self.window + extra).min(bytes.len())))
        } else {
            // A keyword need not be inside the match (`airtable_token: pat…` has the rule's keyword in its label
            // only): the window reaches [`KEYWORD_REACH`] further.
            let reach = self.window + KEYWORD_REACH;
            Some((end.saturating_sub(reach), (start + reach).min(bytes.len())))
        }
    }
}

/// The compiled rule set.
pub(crate) struct Providers {
    keywords: Keywords,
    /// The rules each keyword (by pattern id) starts.
    keyword_rules: Vec<Vec<KeywordRule>>,
    /// Whether each keyword is one of [`screen::SECRET_NAME_WORDS`], which a labelled secret's name holds: the
    /// same pass then says whether the scan needs its labelled-secret group ([`KeywordPass::names_a_secret`]).
    names_a_secret: Vec<bool>,
    rules: Vec<Rule>,
    global: Allowlist,
}

/// A rule a keyword starts, and how the keyword must be spelt to start one of its matches.
struct KeywordRule {
    rule: usize,
    /// For a rule whose every match begins with one of its keywords ([`Rule::keyword_first`]) and is at most
    /// [`Rule::window`] long (below [`MAX_WINDOW`]): the spellings of this keyword its matches can begin with,
    /// byte for byte (`SK` for Twilio's `SK[0-9a-fA-F]{32}`, whose keyword is `sk`). Keywords are found with their
    /// ASCII case ignored, so a hit spelt otherwise (the `sk` of `task`, `risk`, `sk-…`) starts no match, and its
    /// window is not opened. `None`: any spelling may (patterns that ignore case, or read past their window).
    spellings: Option<Box<[Box<[u8]>]>>,
}

impl KeywordRule {
    /// Whether a hit of the keyword spelt `hit` may start a match of the rule. A match the rule's search in a
    /// window can find starts at a hit spelt as one of [`KeywordRule::spellings`] (it begins with a literal of
    /// its pattern's, whose first bytes are one of its keywords as spelt there) and ends within that hit's own
    /// window; so the windows of the other hits change no match found, only what is read.
    #[inline]
    fn may_start_a_match(&self, hit: &[u8]) -> bool {
        self.spellings.as_ref().is_none_or(|spellings| spellings.iter().any(|spelt| **spelt == *hit))
    }
}

/// The keywords' DFA, read by [`keyword_hits`], and its unanchored start state.
struct Keywords {
    dfa: aho_corasick::dfa::DFA,
    start: aho_corasick::automaton::StateID,
}

/// What the keyword pass over a text found.
pub(crate) struct KeywordPass {
    /// The windows the rules' patterns run in: no two of one rule overlap.
    windows: Vec<Window>,
    /// Whether the text holds one of [`screen::SECRET_NAME_WORDS`], any ASCII case: without one no labelled
    /// secret can be found in it.
    pub(crate) names_a_secret: bool,
}

/// Where one rule's pattern runs: `text[from..to]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Window {
    rule: usize,
    from: usize,
    to: usize,
    /// Every hit that opened or widened the window starts at `from`, and every match of the rule starts at a hit
    /// of its keywords ([`Rule::keyword_first`]): a match can start only at `from`, so one anchored search there
    /// finds what the search over the window finds. It costs a few bytes' steps where the unanchored search paid
    /// its prefilter's call and read to the window's end (a keyword without a token after it, as on text dense
    /// with keywords, is refused at its first bytes).
    at_from_only: bool,
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
            // A DFA without a prefilter: a secret is a few dozen bytes, and the rare-bytes prefilter the default
            // picks for gitleaks' two global stop words stops at most digits of a secret (about 2,400
            // instructions per secret on the gitleaks corpus, against a byte's step each).
            let automaton = aho_corasick::AhoCorasick::builder()
                .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                .prefilter(false)
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
        let mut keyword_rules: Vec<Vec<KeywordRule>> = Vec::new();
        for spec in config.rules {
            let Some(pattern) = spec.regex.as_deref() else { continue };
            if LEFT_OUT.contains(&spec.id.as_str()) || spec.keywords.is_empty() {
                continue;
            }
            let mut allowlists = Vec::new();
            for allow in &spec.allowlists {
                allowlists.extend(Allowlist::compile(allow)?);
            }
            // The windows are the full pattern's (its longest match, whether its keyword comes first); the
            // search runs the pattern without its lead where that finds the same secrets and no allowlist
            // reads where the match starts.
            let reads_match = |allow: &Allowlist| allow.target == Target::Match;
            let lead_kept = reads_match(&global) || allowlists.iter().any(reads_match);
            let searched = without_lead(pattern).filter(|_| !lead_kept);
            let regex = compile(searched.as_deref().unwrap_or(pattern))?;
            let whole_match_secret = syntax::parse(&convert(searched.as_deref().unwrap_or(pattern)))
                .is_ok_and(|hir| secret_is_whole_match(&hir, spec.secret_group));
            let hir = syntax::parse(&convert(pattern)).ok();
            let longest = hir.as_ref().and_then(|hir| hir.properties().maximum_len()).unwrap_or(MAX_WINDOW);
            let lower: Vec<String> = spec.keywords.iter().map(|k| k.to_ascii_lowercase()).collect();
            let keyword_first = hir.as_ref().is_some_and(|hir| begins_with_keyword(hir, &lower));
            let word_start = keyword_first
                && hir.as_ref().is_some_and(|hir| hir.properties().look_set_prefix().contains(Look::WordAscii));
            let index = rules.len();
            rules.push(Rule {
                regex,
                secret_group: spec.secret_group,
                whole_match_secret,
                entropy: spec.entropy,
                window: longest.min(MAX_WINDOW),
                keyword_first,
                word_start,
                allowlists,
            });
            let bounded = keyword_first && longest < MAX_WINDOW;
            for keyword in lower {
                let spellings = hir.as_ref().filter(|_| bounded).and_then(|hir| spellings_of(hir, &keyword));
                let entry = KeywordRule { rule: index, spellings };
                match keywords.iter().position(|k| *k == keyword) {
                    Some(at) => keyword_rules[at].push(entry),
                    None => {
                        keywords.push(keyword);
                        keyword_rules.push(vec![entry]);
                    }
                }
            }
        }
        let mut names_a_secret = vec![false; keywords.len()];
        for word in screen::SECRET_NAME_WORDS {
            let word = String::from_utf8_lossy(word).into_owned();
            match keywords.iter().position(|k| *k == word) {
                Some(at) => names_a_secret[at] = true,
                None => {
                    keywords.push(word);
                    keyword_rules.push(Vec::new());
                    names_a_secret.push(true);
                }
            }
        }
        // A DFA: the keyword pass reads every byte of every result, and the NFA kinds read a byte several
        // times slower (a few hundred keywords over all letters leave no prefilter to skip with). No
        // prefilter, as `AhoCorasick` would choose none here either; the DFA itself, not an `AhoCorasick`
        // around it, so that [`keyword_hits`] steps it inline.
        let dfa = aho_corasick::dfa::DFA::builder()
            .ascii_case_insensitive(true)
            .prefilter(false)
            .build(&keywords)
            .map_err(|err| err.to_string())?;
        if rules.len() >= usize::from(u16::MAX) {
            return Err(format!("{} rules: the keyword pass numbers them in a u16", rules.len()));
        }
        let start = dfa.start_state(aho_corasick::Anchored::No).map_err(|err| err.to_string())?;
        let keywords = Keywords { dfa, start };
        Ok(Providers { keywords, keyword_rules, names_a_secret, rules, global })
    }

    /// Calls `on_secret` for each provider secret in `text`, in order of start, never overlapping, but for
    /// those inside one of `covered` (other findings, in order, never overlapping): a window that lies inside
    /// one of them is not searched. Whatever it would find lies inside that finding, and so does anything
    /// such a secret would keep out (a secret overlapping it overlaps the finding), so leaving the window out
    /// changes nothing the caller keeps (it drops every secret overlapping a finding). A provider key our own
    /// patterns found (`AKIA…`, `ghp_…`) is thus not matched, captured and weighed a second time.
    #[cfg(test)]
    pub(crate) fn find(&self, text: &str, covered: &[Finding], on_secret: impl FnMut(Secret)) {
        self.find_in(self.keyword_pass(text), text, covered, on_secret);
    }

    /// [`Providers::find`] after the keyword pass over `text`.
    pub(crate) fn find_in(
        &self,
        pass: KeywordPass,
        text: &str,
        covered: &[Finding],
        mut on_secret: impl FnMut(Secret),
    ) {
        let windows = pass.windows;
        if windows.is_empty() {
            return;
        }
        let inside_covered = |from: usize, to: usize| {
            let before = covered.partition_point(|f| f.start <= from);
            before > 0 && covered[before - 1].end >= to
        };
        let mut found: Vec<Secret> = Vec::new();
        for window in windows {
            if !inside_covered(window.from, window.to) {
                self.search_window(window, text, &mut found);
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

    /// The windows `(rule, from, to)` the rules' patterns run in: no two of one rule overlap.
    #[cfg(test)]
    fn windows(&self, text: &str) -> Vec<(usize, usize, usize)> {
        self.keyword_pass(text).windows.into_iter().map(|w| (w.rule, w.from, w.to)).collect()
    }

    /// The one pass over `text` for every rule's keywords (and the words a labelled secret's name holds).
    pub(crate) fn keyword_pass(&self, text: &str) -> KeywordPass {
        // The open window of each rule, merged as hits come in order: `open` in the order the rules' first windows
        // opened, `slot[rule]` one past the rule's place there (0: none yet), allocated at the first hit that opens
        // one, so a text with no keyword costs only the keyword pass, and one that opens a few windows zeroes a
        // slot of two bytes per rule rather than a window's room (the order of the windows is no matter: what
        // they find is sorted).
        let bytes = text.as_bytes();
        let mut slot: Vec<u16> = Vec::new();
        let mut open: Vec<Window> = Vec::new();
        let mut windows: Vec<Window> = Vec::new();
        let mut names_a_secret = false;
        keyword_hits(&self.keywords, bytes, |hit| {
            names_a_secret |= self.names_a_secret[hit.pattern().as_usize()];
            for entry in &self.keyword_rules[hit.pattern().as_usize()] {
                if !entry.may_start_a_match(&bytes[hit.start()..hit.end()]) {
                    continue;
                }
                let rule = entry.rule;
                let spec = &self.rules[rule];
                let Some((from, to)) = spec.window_at(bytes, hit.start(), hit.end()) else { continue };
                if slot.is_empty() {
                    slot = vec![0; self.rules.len()];
                }
                let window = Window { rule, from, to, at_from_only: spec.keyword_first };
                match usize::from(slot[rule]).checked_sub(1) {
                    None => {
                        open.push(window);
                        // Fewer rules than `u16::MAX`: the build refuses more.
                        slot[rule] = u16::try_from(open.len()).unwrap_or(u16::MAX);
                    }
                    Some(at) if from <= open[at].to => {
                        open[at].to = open[at].to.max(to);
                        open[at].at_from_only &= from == open[at].from;
                    }
                    Some(at) => windows.push(std::mem::replace(&mut open[at], window)),
                }
            }
        });
        if windows.is_empty() {
            // No window closed (the usual case on a short text): the open ones are all, in the same order.
            windows = open;
        } else {
            windows.extend(open);
        }
        KeywordPass { windows, names_a_secret }
    }

    /// Pushes the kept matches of one rule's pattern in its window to `found`.
    fn search_window(&self, window: Window, text: &str, found: &mut Vec<Secret>) {
        {
            let Window { rule: rule_index, from, to, at_from_only } = window;
            let rule = &self.rules[rule_index];
            let mut caps: Option<Captures> = None;
            let mut at = from;
            while at < to {
                // The lazy DFA finds the match; the slower capture engines then read only the match itself.
                let search = Input::new(text).range(at..to);
                let located = if at_from_only {
                    // The only search of the window: nothing else can start in it ([`Window::at_from_only`]).
                    rule.regex.search(&search.anchored(Anchored::Yes))
                } else {
                    rule.regex.search(&search)
                };
                let Some(located) = located else { break };
                if rule.whole_match_secret {
                    // The match is the secret: the capture search would find the same span.
                    at = if at_from_only {
                        to
                    } else if located.is_empty() {
                        located.end() + 1
                    } else {
                        located.end()
                    };
                    if let Some(secret) = text.get(located.range())
                        && self.keep(rule, text, secret, secret, located.start())
                    {
                        found.push(Secret { start: located.start(), end: located.end() });
                    }
                    continue;
                }
                let input = Input::new(text).range(located.range()).anchored(Anchored::Yes);
                let caps = caps.get_or_insert_with(|| rule.regex.create_captures());
                rule.regex.search_captures(&input, caps);
                let Some(whole) = caps.get_match() else {
                    at = if at_from_only { to } else { located.end().max(located.start() + 1) };
                    continue;
                };
                at = if at_from_only {
                    to
                } else if whole.end() > whole.start() {
                    whole.end()
                } else {
                    whole.end() + 1
                };
                let span = match rule.secret_group {
                    Some(group) => caps.get_group(group),
                    None => (1..caps.group_len()).find_map(|group| caps.get_group(group)),
                }
                .unwrap_or(whole.span());
                // A span of a regex over `text` lies on character boundaries unless an ASCII class met a
                // multi-byte character; such a span is no token.
                let (Some(secret), Some(matched)) = (text.get(span.range()), text.get(whole.range())) else { continue };
                if self.keep(rule, text, secret, matched, span.start) {
                    found.push(Secret { start: span.start, end: span.end });
                }
            }
        }
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

/// A semi-generic rule's pattern without its lead, the same search for the secrets it finds; `None` for another
/// rule. gitleaks writes 96 rules in one shape: a lazy run of up to 50 word characters, the keyword, the rest
/// (`(?i)[\w.-]{0,50}?(?:adafruit)(?:[ \t\w.-]{0,20})…([a-z0-9_-]{32})…`). The lead only moves where a match
/// starts: the run can be empty, so a match of the rest at `k` is a match from `k`, and leftmost-first search
/// returns the match of the rest at the smallest `k` where the rest matches (from the start of the run before
/// it, where the lazy run stops at the first such `k`), with the same end and groups. Its unanchored DFA, though,
/// tracks where each of the last 50 word characters could have started a match, times the rest's own counted
/// runs: on text dense with a rule's samples it fills its cache, clears it and gives up for the PikeVM (the
/// gitleaks corpus ran at ~2 MB/s). Only the start of the match differs, which only an allowlist on the
/// match reads; none of gitleaks' rules has one where a lead is taken off ([`Providers::build`] checks it).
fn without_lead(pattern: &str) -> Option<String> {
    // The keyword's group reopened as the lead leaves it: `(?i)` stays, and the five rules written with a
    // second, case-sensitive run before a `(?i:` group keep that group.
    const LEADS: [(&str, &str); 2] = [(r"(?i)[\w.-]{0,50}?", "(?i)"), (r"[\w.-]{0,50}?(?i:[\w.-]{0,50}?", "(?i:")];
    LEADS.iter().find_map(|(lead, kept)| pattern.strip_prefix(lead).map(|rest| format!("{kept}{rest}")))
}

/// Whether the secret of every match of `hir` is the whole match: the secret is the group `secret_group`, else the
/// first group that took part, else the whole match ([`Providers::search_window`]). So it is when the pattern has
/// no group (`ghp_[0-9a-zA-Z]{36}`), or its one group holds all of it but zero-width assertions
/// (`\b((?:A3T[A-Z0-9]|AKIA|…)[A-Z2-7]{16})\b`) and is the one reported. `false` whenever it cannot tell.
fn secret_is_whole_match(hir: &Hir, secret_group: Option<usize>) -> bool {
    let groups = hir.properties().explicit_captures_len();
    if groups == 0 {
        return true;
    }
    if groups != 1 || !matches!(secret_group, None | Some(1)) {
        return false;
    }
    let parts = match hir.kind() {
        HirKind::Concat(parts) => parts.as_slice(),
        _ => std::slice::from_ref(hir),
    };
    let mut widths = parts.iter().filter(|part| !matches!(part.kind(), HirKind::Look(_)));
    matches!((widths.next(), widths.next()), (Some(only), None) if matches!(only.kind(), HirKind::Capture(_)))
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

/// How `keyword` (lower case) is spelt at the start of the matches of `hir`, a pattern whose every match begins
/// with one of its keywords ([`begins_with_keyword`]): the first bytes of each of its prefix literals that begin
/// with the keyword, any ASCII case. `None` when its literals are not known, or when they spell it in more than
/// [`MAX_SPELLINGS`] ways (a pattern that ignores case: any spelling may start a match).
fn spellings_of(hir: &Hir, keyword: &str) -> Option<Box<[Box<[u8]>]>> {
    let prefixes = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    let mut spellings: Vec<Box<[u8]>> = Vec::new();
    for literal in prefixes.literals()? {
        let Some(spelt) = literal.as_bytes().get(..keyword.len()) else { continue };
        if spelt.eq_ignore_ascii_case(keyword.as_bytes()) && !spellings.iter().any(|known| **known == *spelt) {
            spellings.push(spelt.into());
        }
    }
    // Every case of its letters: no hit is left out, so none is compared.
    let letters = keyword.bytes().filter(u8::is_ascii_alphabetic).count();
    let every_case = u32::try_from(letters).ok().and_then(|letters| 1usize.checked_shl(letters));
    (spellings.len() <= MAX_SPELLINGS && Some(spellings.len()) != every_case).then(|| spellings.into_boxed_slice())
}

/// The most spellings of a keyword compared at each of its hits ([`spellings_of`]).
const MAX_SPELLINGS: usize = 4;

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

/// Calls `on_hit` for every hit of the keywords in `haystack`, overlapping, in the order
/// `AhoCorasick::find_overlapping_iter` reports them (by end, then as the match state lists them): the same
/// steps as its search (aho-corasick's `try_find_overlapping_fwd` without a prefilter), written here so that
/// the DFA's transition is inlined into the loop rather than reached through the `AhoCorasick`'s trait
/// object, one hit returned from a call at a time (about twenty instructions a byte there, nine here).
/// Never inlined: inside its caller the loop reloaded the haystack's address from the stack at every byte.
#[inline(never)]
fn keyword_hits(keywords: &Keywords, haystack: &[u8], mut on_hit: impl FnMut(aho_corasick::Match)) {
    let Keywords { dfa: keywords, start } = keywords;
    let mut state = *start;
    let mut report = |state, end: usize| {
        for index in 0..keywords.match_len(state) {
            let pattern = keywords.match_pattern(state, index);
            on_hit(aho_corasick::Match::new(pattern, end - keywords.pattern_len(pattern)..end));
        }
    };
    // An empty keyword: the start state matches, once, at the start.
    if keywords.is_match(state) {
        report(state, 0);
    }
    let next = |state, byte| keywords.next_state(aho_corasick::Anchored::No, state, byte);
    // The state after a byte, its hits reported (`end` is the offset after the byte); `false` at the dead state.
    let mut after = |state: aho_corasick::automaton::StateID, end: usize| {
        if keywords.is_special(state) {
            if keywords.is_dead(state) {
                return false;
            }
            if keywords.is_match(state) {
                report(state, end);
            }
        }
        true
    };
    // Four bytes a step while none of their states is special (no hit, no dead end), as most bytes are: the
    // loop's own count and test paid once per four bytes. A four whose states hold a special one has each of
    // its four states looked at in turn, as the bytes' own steps would.
    let (fours, rest) = haystack.as_chunks::<4>();
    let mut end = 0;
    for &[b0, b1, b2, b3] in fours {
        let s0 = next(state, b0);
        let s1 = next(s0, b1);
        let s2 = next(s1, b2);
        let s3 = next(s2, b3);
        if keywords.is_special(s0) | keywords.is_special(s1) | keywords.is_special(s2) | keywords.is_special(s3)
            && !(after(s0, end + 1) && after(s1, end + 2) && after(s2, end + 3) && after(s3, end + 4))
        {
            return;
        }
        state = s3;
        end += 4;
    }
    for &byte in rest {
        state = next(state, byte);
        end += 1;
        if !after(state, end) {
            return;
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failing unwrap is a failing test
mod tests;
