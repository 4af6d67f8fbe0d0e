//! Unit tests of `providers`.

use std::sync::LazyLock;

use proptest::prelude::*;

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

/// The rules `keyword` starts.
fn keyword_rules<'a>(providers: &'a Providers, keyword: &str) -> &'a [KeywordRule] {
    let mut at = None;
    keyword_hits(&providers.keywords, keyword.as_bytes(), |hit| {
        if (hit.start(), hit.end()) == (0, keyword.len()) {
            at = at.or(Some(hit.pattern().as_usize()));
        }
    });
    &providers.keyword_rules[at.unwrap()]
}

fn rule<'a>(providers: &'a Providers, id_keyword: &str) -> &'a Rule {
    &providers.rules[keyword_rules(providers, id_keyword)[0].rule]
}

/// The hits [`keyword_hits`] reports in `text`.
fn hits_inline(keywords: &Keywords, text: &str) -> Vec<aho_corasick::Match> {
    let mut hits = Vec::new();
    keyword_hits(keywords, text.as_bytes(), |hit| hits.push(hit));
    hits
}

/// The hits aho-corasick's own overlapping search reports in `text`, on the same DFA.
fn hits_by_the_library(keywords: &Keywords, text: &str) -> Vec<aho_corasick::Match> {
    let (input, mut state) = (aho_corasick::Input::new(text), aho_corasick::automaton::OverlappingState::start());
    let mut hits = Vec::new();
    loop {
        keywords.dfa.try_find_overlapping(&input, &mut state).unwrap();
        match state.get_match() {
            Some(hit) => hits.push(hit),
            None => return hits,
        }
    }
}

/// The windows of `text` as the keyword pass first computed them: the hits from aho-corasick's own search, every
/// rule's open window in a slot of its own, the windows still open at the end listed in the order they opened.
fn windows_the_long_way(providers: &Providers, text: &str) -> Vec<Window> {
    let bytes = text.as_bytes();
    let mut open: Vec<Option<Window>> = vec![None; providers.rules.len()];
    let mut opened: Vec<usize> = Vec::new();
    let mut windows: Vec<Window> = Vec::new();
    for hit in hits_by_the_library(&providers.keywords, text) {
        for entry in &providers.keyword_rules[hit.pattern().as_usize()] {
            if !entry.may_start_a_match(&bytes[hit.start()..hit.end()]) {
                continue;
            }
            let rule = entry.rule;
            let spec = &providers.rules[rule];
            let Some((from, to)) = spec.window_at(bytes, hit.start(), hit.end()) else { continue };
            match &mut open[rule] {
                Some(window) if from <= window.to => {
                    window.to = window.to.max(to);
                    window.at_from_only &= from == window.from;
                }
                slot => match slot.replace(Window { rule, from, to, at_from_only: spec.keyword_first }) {
                    Some(closed) => windows.push(closed),
                    None => opened.push(rule),
                },
            }
        }
    }
    windows.extend(opened.into_iter().filter_map(|rule| open[rule]));
    windows
}

#[test]
fn the_keyword_pass_reports_what_aho_corasicks_overlapping_search_reports() {
    let providers = providers().unwrap();
    let secrets = corpus_secrets();
    let texts = [
        secrets.join("\n"),
        secrets.iter().map(|s| s.to_ascii_uppercase()).collect::<Vec<_>>().join(" "),
        "glpat-x xoxb- AKIA sk- ghp_ adafruit_key: hooks.slack.com/ eyJ a3- q~ sc_ token=\n".repeat(40),
        "rotated key=AKIA4HK2Q7ZLMX9RT3WB; token: ghp_R8sT2uVw9xYz4AbCdEfGh1JkLmNoPq3RsTuV, Pass: Secret_KEY"
            .to_owned(),
        String::new(),
    ];
    let (mut total, mut windows) = (0, 0);
    for text in &texts {
        let hits = hits_inline(&providers.keywords, text);
        assert_eq!(hits, hits_by_the_library(&providers.keywords, text), "{text}");
        total += hits.len();
        let pass = providers.keyword_pass(text);
        assert_eq!(pass.windows, windows_the_long_way(providers, text), "{text}");
        windows += pass.windows.len();
    }
    assert!(total > 5_000 && windows > 2_000, "{total} hits, {windows} windows");
}

proptest! {
    /// Any keywords, any text, any ASCII case: the hits of the DFA read inline are the hits, in order, of an
    /// `AhoCorasick` built from the same keywords as the masker built it before (a DFA, ASCII case ignored).
    #[test]
    fn the_keyword_pass_reports_what_an_aho_corasick_reports(
        words in prop::collection::vec("[a-cA-C_.-]{1,4}", 1..12),
        text in "[a-dA-D_. -]{0,80}",
    ) {
        let dfa = aho_corasick::dfa::DFA::builder().ascii_case_insensitive(true).prefilter(false).build(&words).unwrap();
        let start = dfa.start_state(aho_corasick::Anchored::No).unwrap();
        let keywords = Keywords { dfa, start };
        let reference = aho_corasick::AhoCorasick::builder()
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .ascii_case_insensitive(true)
            .build(&words)
            .unwrap();
        let expected: Vec<aho_corasick::Match> = reference.find_overlapping_iter(&text).collect();
        prop_assert_eq!(hits_inline(&keywords, &text), expected);
    }

    /// The masker's own keywords on generated text.
    #[test]
    fn the_keyword_pass_reports_what_the_library_reports_on_generated_text(
        text in "(glpat-|xoxb-|AKIA|sk-|ghp_|TOKEN|key|Pass|secret|[ a-zA-Z0-9_=:.-]{1,6}){0,20}",
    ) {
        let providers = providers().unwrap();
        prop_assert_eq!(hits_inline(&providers.keywords, &text), hits_by_the_library(&providers.keywords, &text));
        prop_assert_eq!(providers.keyword_pass(&text).windows, windows_the_long_way(providers, &text));
    }
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
    let opened: Vec<_> = providers.windows(text).into_iter().map(|(_, from, to)| &text[from..to]).collect();
    // Only Twilio's `SK…` (no boundary in its pattern) reads from `sked` and `SKU` on, 34 bytes at most each.
    assert!(opened.iter().map(|w| w.len()).sum::<usize>() <= 2 * 34, "{opened:?}");
    assert!(secrets(text).is_empty());
    // The same keywords starting tokens are still found.
    let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
    assert_eq!(secrets(&format!("they sent {jwt} ")), [jwt]);
    assert_eq!(secrets("asked SK0123456789abcdef0123456789abcdef"), ["SK0123456789abcdef0123456789abcdef"]);
}

#[test]
fn a_rule_searched_without_its_lead_finds_what_its_whole_pattern_finds() {
    let providers = Providers::build().unwrap();
    let mut whole = Providers::build().unwrap();
    let config: Config = toml::from_str(RULES).unwrap();
    let patterns =
        config.rules.iter().filter(|spec| !LEFT_OUT.contains(&spec.id.as_str()) && !spec.keywords.is_empty());
    let mut leads = 0;
    for (rule, spec) in whole.rules.iter_mut().zip(patterns) {
        let pattern = spec.regex.as_deref().unwrap();
        leads += usize::from(without_lead(pattern).is_some());
        rule.regex = compile(pattern).unwrap();
    }
    assert!(leads >= 95, "{leads} rules without their lead");
    // gitleaks' samples one per line (each rule's windows merge over its neighbours), glued into long runs
    // of word characters, a keyword twice, runs longer than the lead's 50 characters, the Kelvin sign (a
    // `k` to `(?i)`) and a long `s` inside the run before a keyword.
    let corpus = include_str!("../../../../tests/masking/gitleaks/true_positives.tsv");
    let samples: Vec<&str> =
        corpus.lines().filter(|line| !line.starts_with('#')).filter_map(|line| line.rsplit('\t').next()).collect();
    let run = "a".repeat(60);
    let texts = [
        samples.join("\n"),
        samples.join(" "),
        samples.iter().map(|s| format!("{run}{s}")).collect::<Vec<_>>().join("\n"),
        samples.iter().map(|s| format!("x\u{212A}\u{17F}.{s}{s}")).collect::<Vec<_>>().join("-"),
        "twitter_twitter_key = 123456789012345678-abcdefghijklmnopqrstuvwxyz\n".repeat(3),
    ];
    for text in &texts {
        for window in providers.keyword_pass(text).windows {
            let (mut expected, mut found) = (Vec::new(), Vec::new());
            whole.search_window(window, text, &mut expected);
            providers.search_window(window, text, &mut found);
            assert_eq!(found, expected, "{}", &text[window.from..window.to]);
        }
    }
}

/// gitleaks' secrets, one per sample of its corpus.
fn corpus_secrets() -> Vec<&'static str> {
    include_str!("../../../../tests/masking/gitleaks/true_positives.tsv")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split('\t').nth(2))
        .collect()
}

/// The rule set searched the long way: every match's secret read by a capture search.
static CAPTURING: LazyLock<Providers> = LazyLock::new(|| {
    let mut providers = Providers::build().unwrap();
    for rule in &mut providers.rules {
        rule.whole_match_secret = false;
    }
    providers
});

/// Each window of `text` searched as the masker searches it, and the long way: unanchored from its start (the
/// path without [`Window::at_from_only`]), every match captured (without [`Rule::whole_match_secret`]). The same
/// secrets. Returns how many windows were searched anchored, and how many by rules whose match is the secret.
fn shortcuts_find_what_the_long_way_finds(providers: &Providers, text: &str) -> Result<(usize, usize), TestCaseError> {
    let (mut anchored, mut whole) = (0, 0);
    for window in providers.keyword_pass(text).windows {
        let (mut found, mut expected) = (Vec::new(), Vec::new());
        providers.search_window(window, text, &mut found);
        CAPTURING.search_window(Window { at_from_only: false, ..window }, text, &mut expected);
        whole += usize::from(providers.rules[window.rule].whole_match_secret);
        prop_assert_eq!(&found, &expected, "{:?} in {:?}", window, &text[window.from..window.to]);
        anchored += usize::from(window.at_from_only);
    }
    Ok((anchored, whole))
}

#[test]
fn windows_searched_at_their_start_and_matches_not_captured_find_the_same() {
    let providers = providers().unwrap();
    let secrets = corpus_secrets();
    // Each secret alone on its line (a window per hit), glued with spaces and glued to a word before it (the
    // windows of neighbours merge, hits glued to a word open none), and each twice in a row.
    let texts = [
        secrets.join("\n"),
        secrets.join(" "),
        secrets.iter().map(|s| format!("x{s}")).collect::<Vec<_>>().join("\n"),
        secrets.iter().map(|s| format!("{s}{s}")).collect::<Vec<_>>().join("\n"),
        "glpat-x xoxb- AKIA sk- ghp_ adafruit_key: hooks.slack.com/ eyJ a3- q~ sc_ token=\n".repeat(40),
    ];
    let (mut anchored, mut whole) = (0, 0);
    for text in &texts {
        let (a, w) = shortcuts_find_what_the_long_way_finds(providers, text).unwrap();
        anchored += a;
        whole += w;
    }
    // The shortcuts are taken, on many of gitleaks' samples.
    assert!(anchored > 2_000 && whole > 2_000, "{anchored} windows searched anchored, {whole} without captures");
}

#[test]
fn rules_whose_secret_is_the_whole_match_are_known() {
    let providers = providers().unwrap();
    // No group; one group around all but `\b`.
    for keyword in ["ghp_", "glpat-", "akia", "sk"] {
        assert!(rule(providers, keyword).whole_match_secret, "{keyword}");
    }
    // The secret is a group inside the match: a label or a delimiter around it.
    for keyword in ["adafruit", "q~", "s.", "airtable"] {
        assert!(!rule(providers, keyword).whole_match_secret, "{keyword}");
    }
    let whole = providers.rules.iter().filter(|rule| rule.whole_match_secret).count();
    assert!(whole >= 57, "{whole} rules without a capture search");
}

/// One of gitleaks' secrets, whole or cut short.
fn secret_whole_or_cut_short() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(corpus_secrets()).prop_flat_map(|s| (Just(s), 0..=s.len())).prop_map(|(s, cut)| {
            let mut cut = cut;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s[..cut].to_owned()
        }),
        prop::sample::select(corpus_secrets()).prop_map(str::to_owned),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Generated texts: gitleaks' secrets cut short, keywords, word runs and separators glued in any order.
    #[test]
    fn shortcuts_find_what_the_long_way_finds_on_generated_text(
        pieces in prop::collection::vec(
            prop_oneof![
                secret_whole_or_cut_short(),
                prop::sample::select(&["glpat-", "ghp_", "xoxb-", "sk-", "sk-ant-", "AKIA", "eyJ", "SK", "s.", "hooks.slack.com/", "a3-", "q~", "sc_"][..]).prop_map(str::to_owned),
                "[ \n=:\"'_.-]{1,3}",
                "[A-Za-z0-9_]{1,40}",
            ],
            0..12,
        )
    ) {
        let text = pieces.concat();
        shortcuts_find_what_the_long_way_finds(providers().unwrap(), &text)?;
    }
}

#[test]
fn go_classes_become_ascii_classes() {
    assert_eq!(convert(r"[\w.-]{0,50}\b\s"), r"[[0-9A-Za-z_].-]{0,50}(?-u:\b)[\t\n\x0C\r ]");
    assert_eq!(convert(r"^\$(?:\d+|{\d+})$"), r"^\$(?:[0-9]+|\{[0-9]+\})$");
}

/// The rule set without [`KeywordRule::spellings`]: every hit of a keyword opens its rules' windows, any case.
static ANY_SPELLING: LazyLock<Providers> = LazyLock::new(|| {
    let mut providers = Providers::build().unwrap();
    for entry in providers.keyword_rules.iter_mut().flatten() {
        entry.spellings = None;
    }
    providers
});

/// What `providers` finds in `text`, in order.
fn found_by(providers: &Providers, text: &str) -> Vec<Secret> {
    let mut found = Vec::new();
    providers.find(text, &[], |secret| found.push(secret));
    found
}

#[test]
fn a_keyword_spelt_as_no_match_begins_opens_no_window() {
    let providers = providers().unwrap();
    let spellings = |keyword: &str| {
        keyword_rules(providers, keyword)
            .iter()
            .map(|entry| entry.spellings.as_ref().map(|s| s.iter().map(|s| s.to_vec()).collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    };
    // Twilio's `SK[0-9a-fA-F]{32}`, gitleaks' keyword `sk`: only `SK` starts a match; GitHub's `ghp_`, AWS' `AKIA`.
    assert_eq!(spellings("sk"), [Some(vec![b"SK".to_vec()])]);
    assert!(spellings("ghp_").contains(&Some(vec![b"ghp_".to_vec()])));
    assert!(spellings("akia").contains(&Some(vec![b"AKIA".to_vec()])));
    // A pattern that ignores case (`(?i)…adafruit…`) is opened by any spelling.
    assert!(spellings("adafruit").iter().all(Option::is_none));
    // The `sk` of a word, of `sk-…`: no window; `SK` opens Twilio's.
    let twilio = |text: &str| {
        providers
            .keyword_pass(text)
            .windows
            .iter()
            .filter(|w| std::ptr::eq(&providers.rules[w.rule], rule(providers, "sk")))
            .count()
    };
    assert_eq!(twilio("ask the task desk about sk-sk-sk-risk"), 0);
    assert_eq!(twilio("a key SK0123456789abcdef0123456789abcdef here"), 1);
    assert_eq!(found_by(providers, "SK0123456789abcdef0123456789abcdef").len(), 1);
    // Most of the rules whose tokens begin with a keyword compare its spelling.
    let compared = providers.keyword_rules.iter().flatten().filter(|entry| entry.spellings.is_some()).count();
    assert!(compared >= 100, "{compared} keywords' rules compare the spelling");
    // Fewer windows on a text dense with such hits than with every spelling.
    let text = "tAtk555-0100555-0100sk-sk-sk-sk-s.-xoxb-sk-sk--100sk-sk-sk-sk-s.-xoxb-sk-sk--s-sk-sk--100".repeat(20);
    let (kept, every) = (providers.keyword_pass(&text).windows.len(), ANY_SPELLING.keyword_pass(&text).windows.len());
    assert!(kept < every, "{kept} windows, {every} with every spelling");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Keywords spelt in any case among gitleaks' secrets (whole, cut short, in any case) and the bytes around them:
    /// the hits left out by their spelling change nothing found.
    #[test]
    fn hits_left_out_by_their_spelling_change_nothing_found(
        pieces in prop::collection::vec(
            (
                prop_oneof![
                    secret_whole_or_cut_short(),
                    prop::sample::select(&["sk", "SK", "Sk", "sk-", "sk-ant-", "ghp_", "GHP_", "akia", "AKIA", "Akia", "xoxb-", "XOXB-", "glpat-", "GLPAT-", "eyJ", "EYJ", "AIza", "aiza", "hf_", "HF_", "SG.", "sg.", "task", "risk"][..]).prop_map(str::to_owned),
                    "[ \n=:\"'_.-]{1,3}",
                    "[A-Fa-f0-9]{1,34}",
                    "[A-Za-z0-9_]{1,40}",
                ],
                any::<u64>(),
            ),
            0..12,
        )
    ) {
        // Some pieces with their ASCII case flipped byte by byte, as the seed says.
        let text: String = pieces
            .iter()
            .map(|(piece, seed)| {
                if seed % 3 != 0 {
                    return piece.clone();
                }
                piece.chars().enumerate().map(|(at, c)| if seed >> (at % 64) & 1 == 1 { c.to_ascii_uppercase() } else { c.to_ascii_lowercase() }).collect()
            })
            .collect();
        prop_assert_eq!(found_by(providers().unwrap(), &text), found_by(&ANY_SPELLING, &text), "{:?}", text);
    }
}
